"""Celery tasks of the workload manager (ids only; the rows are the state).

- ``planning.replan``: a new plan for every task (triggers: submission, completion, cancellation,
  weight change, a node joining or leaving); afterwards the throughput tables are recalibrated and the
  plans of the likely next events precomputed for the new state (in this worker process).
- ``planning.advance_transition``: an ack or a report arrived for a transition.
- ``planning.check_transitions``: beat, every second (migration 0003): advance, time out, reconcile.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.db import transaction

from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.planning.selectors import load_cluster
from controlplane.apps.planning.transitions import advance_transition, check_transitions
from controlplane.apps.planning.workload import recalibrate_tasks, refresh_precomputed, replan


@shared_task(name="planning.replan", ignore_result=True)  # type: ignore[misc]
def replan_task(trigger: str, failure_event_id: int | None = None) -> dict[str, Any]:
    with transaction.atomic():
        event = FailureEvent.objects.filter(pk=failure_event_id).first() if failure_event_id else None
        decision = replan(trigger, event)
        recalibrate_tasks(load_cluster())
    refresh_precomputed()
    return {"plan": decision.plan.pk, "transitions": [t.pk for t in decision.transitions]}


@shared_task(name="planning.advance_transition", ignore_result=True)  # type: ignore[misc]
def advance_transition_task(transition_id: int) -> str:
    return advance_transition(transition_id)


@shared_task(name="planning.check_transitions", ignore_result=True)  # type: ignore[misc]
def check_transitions_task() -> dict[str, int]:
    return check_transitions()
