"""Coalesced re-plans: one plan for every re-plan request listed so far (level-triggered).

The requests are triggers appended to a Redis list by
:func:`controlplane.apps.common.triggers.request_replan`,
each followed by a ``planning.replan`` message after the settle window unless one is on its way already
(``REPLAN_SENT_KEY``, which a message clears as it starts). Whichever message runs first takes
the re-plan lock (a PostgreSQL session advisory lock, so one re-plan at a time across Celery processes, and
a killed worker's lock goes with its connection), reads every listed request, plans once for all of them and
only then removes them from the list; requests listed meanwhile make it plan once more. The messages of
the requests it planned for find the list empty or the lock held and return at once. After releasing the
lock it looks at the list again, so a request listed while the lock was held, whose own message found the
lock taken, is never left unplanned; requests a killed worker left listed are planned for by the next
message, which the transition watchdog sends every second while any are listed
(:func:`request_listed_replans`). The throughput calibration is refreshed once per burst, after its last
plan, and the precomputed failure-time plans are asked for then (a task of their own, coalesced).

Redis unreachable: the message plans for its own trigger alone, as every message did before coalescing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import redis
from django.db import connection, transaction

from controlplane.apps.common.triggers import (
    REPLAN_REQUESTS_KEY,
    REPLAN_SENT_KEY,
    orchestration_redis,
    send_replan,
)
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.planning.calibration import recalibrate_tasks
from controlplane.apps.planning.choices import PlanTrigger
from controlplane.apps.planning.precomputed import request_precomputed_refresh
from controlplane.apps.planning.replan import replan
from controlplane.apps.planning.selectors import load_cluster

log = logging.getLogger(__name__)

REPLAN_LOCK_KEY = 0x72706C6E  # "rpln": the session advisory lock one coalesced re-plan holds


@dataclass
class ReplanRun:
    """What one ``planning.replan`` message did: the plans it recorded (none when another message had
    already planned for its request) and how many requests they answered."""

    plans: list[int] = field(default_factory=list)
    transitions: list[int] = field(default_factory=list)
    requests: int = 0


def listed_replan_requests(client: redis.Redis) -> list[str]:
    """Every request listed so far, oldest first (left listed until a plan answered them)."""
    listed = client.lrange(REPLAN_REQUESTS_KEY, 0, -1)
    return [raw.decode() if isinstance(raw, bytes) else str(raw) for raw in listed]


def forget_replan_requests(client: redis.Redis, count: int) -> None:
    """Remove the ``count`` oldest requests (a plan answered them; later ones stay listed)."""
    client.ltrim(REPLAN_REQUESTS_KEY, count, -1)


def _try_replan_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [REPLAN_LOCK_KEY])
        (taken,) = cursor.fetchone()
    return bool(taken)


def _release_replan_lock() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock(%s)", [REPLAN_LOCK_KEY])


def replan_running() -> bool:
    """Whether a coalesced re-plan holds the re-plan lock now (in any process)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = 0 "
            "AND objid = %s AND granted)",
            [REPLAN_LOCK_KEY],
        )
        (running,) = cursor.fetchone()
    return bool(running)


def request_listed_replans() -> bool:
    """Send a ``planning.replan`` message when requests are listed and no re-plan runs (the watchdog's
    reconciliation: a killed worker's requests, a lost message). Returns whether one was sent."""
    try:
        listed = orchestration_redis().llen(REPLAN_REQUESTS_KEY)
    except redis.RedisError:
        return False
    if not listed or replan_running():
        return False
    send_replan(PlanTrigger.MANUAL)
    return True


def plan_trigger_of(requests: list[str]) -> PlanTrigger:
    """The trigger a plan answering ``requests`` is recorded with: the newest known one (what the burst ended
    with, e.g. a task submitted after the nodes it waited for joined)."""
    for raw in reversed(requests):
        if raw in PlanTrigger.values:
            return PlanTrigger(raw)
        log.warning("an unknown re-plan trigger %r was ignored", raw)
    return PlanTrigger.MANUAL


def _plan_once(trigger: PlanTrigger, failure_event_id: int | None, run: ReplanRun) -> None:
    with transaction.atomic():
        event = FailureEvent.objects.filter(pk=failure_event_id).first() if failure_event_id else None
        decision = replan(trigger, event)
    run.plans.append(decision.plan.pk)
    run.transitions.extend(t.pk for t in decision.transitions)


def _after_burst() -> None:
    with transaction.atomic():
        recalibrate_tasks(load_cluster())
    request_precomputed_refresh()


def do_coalesced_replan(trigger: str, failure_event_id: int | None = None) -> ReplanRun:
    """Plan for every listed re-plan request (``trigger`` is this message's own, planned for by whichever
    message takes it from the list)."""
    run = ReplanRun()
    try:
        client = orchestration_redis()
        client.delete(REPLAN_SENT_KEY)  # a request listed from now on may be after the read below: it sends
        while True:
            if not _try_replan_lock():
                return run  # the holder plans for what is listed, and looks again after releasing
            try:
                while requests := listed_replan_requests(client):
                    _plan_once(plan_trigger_of(requests), failure_event_id, run)
                    forget_replan_requests(client, len(requests))
                    run.requests += len(requests)
                    failure_event_id = None
                if run.plans:
                    _after_burst()
            finally:
                _release_replan_lock()
            if not client.llen(REPLAN_REQUESTS_KEY):
                return run
    except redis.RedisError as exc:
        log.warning("re-plan requests unavailable (%s): planning for %s alone", exc, trigger)
        _plan_once(plan_trigger_of([trigger]), failure_event_id, run)
        run.requests += 1
        _after_burst()
        return run
