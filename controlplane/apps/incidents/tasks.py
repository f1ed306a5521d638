"""Celery tasks of failure handling (ids only): ``incidents.handle_failure`` — enqueued after commit for
every failure event whose action is not ``none``, after the settle window (docs/ARCHITECTURE.md §7.2);
``incidents.release_isolations`` (beat) — isolated devices and nodes back to service on probation;
``incidents.reclaim_failure_handling`` (beat, every second) — handling whose worker died is re-enqueued."""

from __future__ import annotations

from celery import shared_task

from controlplane.apps.incidents.claims import do_reclaim_abandoned_handling
from controlplane.apps.incidents.handling import handle_failure
from controlplane.apps.incidents.probation import do_release_isolations
from controlplane.apps.planning.precomputed import refresh_precomputed


@shared_task(name="incidents.handle_failure", ignore_result=True)  # type: ignore[misc]
def handle_failure_task(event_id: int, waited_s: float = 0.0) -> str:
    handled = handle_failure(event_id, waited_s)
    if handled.replanned:
        refresh_precomputed()
    return handled.note


@shared_task(name="incidents.release_isolations", ignore_result=True)  # type: ignore[misc]
def release_isolations_task() -> str:
    released = do_release_isolations()
    return f"returned to service on probation: devices {released.devices}, nodes {released.nodes}"


@shared_task(name="incidents.reclaim_failure_handling", ignore_result=True)  # type: ignore[misc]
def reclaim_failure_handling_task() -> str:
    return f"re-enqueued abandoned handling of failure events {do_reclaim_abandoned_handling()}"
