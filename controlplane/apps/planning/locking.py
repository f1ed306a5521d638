"""One decision at a time: every orchestration entry point (a re-plan, an in-place restart, a failure action,
advancing a transition) takes a PostgreSQL advisory lock, transaction-scoped, first, so no two interleave;
a crashed worker's lock goes with its connection."""

from __future__ import annotations

from django.db import connection

LOCK_KEY = 0x756E6963  # "unic": one key serialises every orchestration decision


def orchestration_lock() -> None:
    """Take the orchestration lock until the current transaction ends (call inside ``atomic``)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
