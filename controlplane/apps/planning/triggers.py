"""Enqueue the orchestration's Celery tasks after the current transaction commits (ids only).

Every trigger is best effort on the broker side: the rows are committed first, and the beat watchdog
(``planning.check_transitions``) re-enqueues what a lost message left behind (unhandled failure events,
transitions whose steps are complete). ``UNICRON_ORCHESTRATION=false`` turns the triggers off (tests of
other parts, tools that must not move workers).
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)

REPLAN = "planning.replan"
ADVANCE_TRANSITION = "planning.advance_transition"
HANDLE_FAILURE = "incidents.handle_failure"


def _send(name: str, kwargs: dict[str, Any], countdown: float | None = None) -> None:
    from controlplane.config.celery import app  # lazy: pure importers never pull Celery in

    try:
        app.send_task(name, kwargs=kwargs, countdown=countdown)
    except Exception:  # the broker is down: the beat watchdog reconciles from the rows
        log.warning("could not enqueue %s %s", name, kwargs, exc_info=True)


def enqueue_on_commit(name: str, countdown: float | None = None, **kwargs: Any) -> None:
    if not settings.UNICRON_ORCHESTRATION:
        return
    transaction.on_commit(lambda: _send(name, kwargs, countdown))


def request_replan(trigger: str, failure_event_id: int | None = None) -> None:
    """Ask the workload manager for a new plan once the caller's transaction commits."""
    enqueue_on_commit(REPLAN, trigger=trigger, failure_event_id=failure_event_id)


def request_failure_handling(event_id: int, countdown: float | None = None, waited_s: float = 0.0) -> None:
    """Handle a failure event after the settle window (``UNICRON_SETTLE_WINDOW_S`` by default)."""
    delay = float(settings.UNICRON_SETTLE_WINDOW_S) if countdown is None else countdown
    enqueue_on_commit(HANDLE_FAILURE, countdown=delay, event_id=event_id, waited_s=waited_s)


def request_transition_advance(transition_id: int) -> None:
    enqueue_on_commit(ADVANCE_TRANSITION, transition_id=transition_id)
