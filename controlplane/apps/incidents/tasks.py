"""Celery task of failure handling (ids only): ``incidents.handle_failure`` — enqueued after commit for
every failure event whose action is not ``none``, after the settle window (docs/ARCHITECTURE.md §7.2)."""

from __future__ import annotations

from celery import shared_task

from controlplane.apps.incidents.handling import handle_failure
from controlplane.apps.planning.workload import refresh_precomputed


@shared_task(name="incidents.handle_failure", ignore_result=True)  # type: ignore[misc]
def handle_failure_task(event_id: int, waited_s: float = 0.0) -> str:
    outcome = handle_failure(event_id, waited_s)
    if outcome.startswith(("re-planned", "node ")):
        refresh_precomputed()
    return outcome
