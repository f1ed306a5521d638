"""Crash-safe failure handling: a worker killed in the middle of ``handle_failure`` does not lose it.

Handling first marks the event claimed (``handling_claimed_at``, committed at once), then holds a
transaction-level advisory lock on the event for the whole handling transaction. The lock goes with the
worker: a commit or a rollback releases it, and so does PostgreSQL when the worker's connection dies
(``client_connection_check_interval`` makes even a backend blocked on a lock notice a dead client within
a second). :func:`do_reclaim_abandoned_handling` (``incidents.reclaim_failure_handling``, every second)
re-enqueues an unhandled event whose claim is older than :data:`RECLAIM_AFTER_S` and whose lock is free:
its claimant is gone. Handling is idempotent and serialised by the orchestration lock, so a duplicate
does no harm. Events that were never claimed (a lost message) are the transition watchdog's
(``planning.check_transitions``) business, as before.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from controlplane.apps.common.triggers import request_failure_handling
from controlplane.apps.incidents.models import FailureEvent

CLAIM_LOCK_CLASS = 0x46455643
"""The first key of the two-key advisory lock of an event's handling (the event id is the second)."""
RECLAIM_AFTER_S = 1.0
"""A claim younger than this is left alone (its worker may be between the claim and taking the lock)."""
RECLAIM_BATCH = 100


def claim_handling(event_id: int) -> None:
    """Mark ``event_id`` claimed (call outside the handling transaction: the mark must outlive it)."""
    unhandled = FailureEvent.objects.filter(pk=event_id, handled_at__isnull=True)
    unhandled.update(handling_claimed_at=timezone.now())


def hold_claim(event_id: int) -> None:
    """Inside the handling transaction: hold the event's claim lock until the transaction ends."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL client_connection_check_interval = '1s'")
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [CLAIM_LOCK_CLASS, event_id])


def release_claim(event_id: int) -> None:
    """The event stays unhandled on purpose (deferred) or its handling failed: nobody holds it now."""
    FailureEvent.objects.filter(pk=event_id, handled_at__isnull=True).update(handling_claimed_at=None)


def _claimant_is_gone(event_id: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", [CLAIM_LOCK_CLASS, event_id])
        row = cursor.fetchone()
    return bool(row and row[0])


def do_reclaim_abandoned_handling(now: datetime | None = None) -> list[int]:
    """Re-enqueue the handling of unhandled events whose claimant died. Returns their ids."""
    now = now or timezone.now()
    claimed = FailureEvent.objects.filter(
        handled_at__isnull=True, handling_claimed_at__lt=now - timedelta(seconds=RECLAIM_AFTER_S)
    ).values_list("pk", flat=True)[:RECLAIM_BATCH]
    out = []
    for event_id in claimed:
        with transaction.atomic():
            if not _claimant_is_gone(event_id):
                continue  # still being handled (a long re-plan, or waiting for the orchestration lock)
            if release_claim_if_unhandled(event_id):
                request_failure_handling(event_id, countdown=0.0)
                out.append(event_id)
    return out


def release_claim_if_unhandled(event_id: int) -> bool:
    return (
        FailureEvent.objects.filter(
            pk=event_id, handled_at__isnull=True, handling_claimed_at__isnull=False
        ).update(handling_claimed_at=None)
        == 1
    )
