"""Asking the orchestration for work, without importing it: Celery tasks enqueued by name (ids only) after
the caller's transaction commits. The apps that notice a change (fleet: a node joined or left; training: a
task submitted, finished or re-weighted; incidents: a failure reported) import this module, never the
planning app, so planning reads the others and none of them reads planning.

Every trigger is best effort on the broker side: the rows are committed first, and the beat watchdog
(``planning.check_transitions``) re-enqueues what a lost message left behind (unhandled failure events,
transitions whose steps are complete). ``UNICRON_ORCHESTRATION=false`` turns the triggers off (tests of
other parts, tools that must not move workers).

**Re-plans coalesce.** A re-plan reads the whole current state, so what it needs to know is only that
something changed since the last plan (level-triggered), not how many things did. :func:`request_replan`
appends its trigger to a Redis list (:data:`REPLAN_REQUESTS_KEY`) and enqueues ``planning.replan`` after
the settle window (``UNICRON_SETTLE_WINDOW_S``); the task takes every request listed so far and plans once
for all of them, and requests that arrive while it plans make it plan once more
(:mod:`controlplane.apps.planning.coalescing`). A burst of joins, returns or failures thus costs one
re-plan per settle window, not one per event. Nor does it cost a message per event: a request sends
``planning.replan`` only when none is on its way (:data:`REPLAN_SENT_KEY`, cleared by the message as it
starts to read the list, and expiring on its own if the message is lost); at a cold start of 2,048 nodes
one message per join had the Celery worker run 2,162 of them, 166 s of its two processes' time, nearly
all finding nothing left to plan.
"""

from __future__ import annotations

import logging
from functools import cache
from typing import Any

import redis
from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)

REPLAN = "planning.replan"
ADVANCE_TRANSITION = "planning.advance_transition"
HANDLE_FAILURE = "incidents.handle_failure"

REPLAN_REQUESTS_KEY = "unicron:replan:requests"
"""The triggers of the re-plans asked for and not planned yet (a Redis list, oldest first)."""
REPLAN_SENT_KEY = "unicron:replan:sent"
"""Set while a ``planning.replan`` message is on its way: the requests listed meanwhile are its to plan."""
REPLAN_SENT_TTL_S = 2.0
"""How long a sent message holds back the next one at most (a lost or delayed message's requests then
get another)."""
REFRESH_PRECOMPUTED = "planning.refresh_precomputed"


@cache
def orchestration_redis() -> redis.Redis:
    """The Redis connection the re-plan requests are kept in (the broker's server)."""
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2.0, socket_connect_timeout=2.0)


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


def send_replan(trigger: str) -> None:
    """Enqueue ``planning.replan`` now, to run after the settle window (the requests it plans for are the
    listed ones)."""
    _send(REPLAN, {"trigger": trigger}, float(settings.UNICRON_SETTLE_WINDOW_S))


def send_precomputed_refresh() -> None:
    """Enqueue ``planning.refresh_precomputed`` now (coalesced by its caller:
    :func:`controlplane.apps.planning.precomputed.request_precomputed_refresh`)."""
    _send(REFRESH_PRECOMPUTED, {})


def _request_replan_now(trigger: str) -> None:
    try:
        client = orchestration_redis()
        client.rpush(REPLAN_REQUESTS_KEY, trigger)
        if not client.set(REPLAN_SENT_KEY, trigger, nx=True, px=int(REPLAN_SENT_TTL_S * 1000)):
            return  # a message on its way plans for this request too
    except redis.RedisError as exc:  # the task then plans for its own trigger alone
        log.warning("re-plan request %s not recorded (%s)", trigger, exc)
    send_replan(trigger)


def request_replan(trigger: str) -> None:
    """Ask the workload manager for a new plan once the caller's transaction commits (coalesced with the
    other requests of the settle window, see the module's docstring)."""
    if not settings.UNICRON_ORCHESTRATION:
        return
    transaction.on_commit(lambda: _request_replan_now(trigger))


def request_failure_handling(event_id: int, countdown: float | None = None, waited_s: float = 0.0) -> None:
    """Handle a failure event after the settle window (``UNICRON_SETTLE_WINDOW_S`` by default)."""
    delay = float(settings.UNICRON_SETTLE_WINDOW_S) if countdown is None else countdown
    enqueue_on_commit(HANDLE_FAILURE, countdown=delay, event_id=event_id, waited_s=waited_s)


def request_transition_advance(transition_id: int) -> None:
    enqueue_on_commit(ADVANCE_TRANSITION, transition_id=transition_id)
