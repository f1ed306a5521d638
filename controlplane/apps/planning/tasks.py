"""Celery tasks of the workload manager (ids only; the rows are the state).

- ``planning.replan``: a new plan for every task (triggers: submission, completion, cancellation,
  weight change, a node joining or leaving), one for all the requests of a burst
  (:mod:`~controlplane.apps.planning.coalescing`); afterwards the throughput tables are recalibrated and
  the plans of the likely next events precomputed for the new state and shared (a request to
  ``planning.refresh_precomputed``).
- ``planning.advance_transition``: an ack or a report arrived for a transition.
- ``planning.check_transitions``: beat, every second (migration 0003): advance, time out, reconcile (re-plan
  requests left listed get a message), and calibrate a running task in a layout it has no measurement of
  once it has a few iteration times there.
- ``incidents.handle_failure``: enqueued after commit for every failure event whose action is not
  ``none``, after the settle window (docs/ARCHITECTURE.md §7.2); the failure handler
  (:mod:`~controlplane.apps.planning.handling`) acts, and a handling that re-planned asks for the
  precomputed plans to be refreshed.
- ``planning.refresh_precomputed``: the plans of the likely next events, for the state as it is now; at
  most one queued or running; one asked for while it runs is queued behind the tasks queued meanwhile
  (:mod:`~controlplane.apps.planning.precomputed`).
"""

from __future__ import annotations

from typing import Any

from celery import shared_task

from controlplane.apps.planning.calibration import calibrate_new_layouts
from controlplane.apps.planning.coalescing import do_coalesced_replan, request_listed_replans
from controlplane.apps.planning.handling import handle_failure
from controlplane.apps.planning.precomputed import do_refresh_precomputed, request_precomputed_refresh
from controlplane.apps.planning.transitions import advance_transition, check_transitions


@shared_task(name="planning.replan", ignore_result=True)  # type: ignore[misc]
def replan_task(trigger: str, failure_event_id: int | None = None) -> dict[str, Any]:
    run = do_coalesced_replan(trigger, failure_event_id)
    return {"plans": run.plans, "transitions": run.transitions, "requests": run.requests}


@shared_task(name="planning.advance_transition", ignore_result=True)  # type: ignore[misc]
def advance_transition_task(transition_id: int) -> str:
    return advance_transition(transition_id)


@shared_task(name="planning.check_transitions", ignore_result=True)  # type: ignore[misc]
def check_transitions_task() -> dict[str, int]:
    counts = check_transitions()
    counts["replans_requested"] = int(request_listed_replans())
    counts["calibrated"] = calibrate_new_layouts()
    return counts


@shared_task(name="incidents.handle_failure", ignore_result=True)  # type: ignore[misc]
def handle_failure_task(event_id: int, waited_s: float = 0.0) -> str:
    handled = handle_failure(event_id, waited_s)
    if handled.replanned:
        request_precomputed_refresh()
    return handled.note


@shared_task(name="planning.refresh_precomputed", ignore_result=True)  # type: ignore[misc]
def refresh_precomputed_task() -> str:
    again = do_refresh_precomputed()
    return "precomputed plans refreshed" + ("; another refresh queued (asked for meanwhile)" if again else "")
