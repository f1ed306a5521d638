"""A Celery worker killed in the middle of ``handle_failure`` does not lose the failure: its claim on the
event goes with its database connection, and the claims watchdog re-enqueues the handling within about
two seconds (before, recovery waited for the transition watchdog's 10 s grace). A handling still alive
(here: waiting for the orchestration lock) is left alone."""

from __future__ import annotations

import os
import signal
import sys
import time

import psycopg
from django.db import connection

from controlplane.apps.incidents.claims import do_reclaim_abandoned_handling
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.planning.locking import LOCK_KEY
from controlplane.config.env import format_database_url
from tests.controlplane.factories import FailureEventFactory, NodeFactory
from tests.processes import spawn

HANDLE = "import django; django.setup(); from controlplane.apps.planning.handling import handle_failure; " \
    "handle_failure({event_id})"  # fmt: skip


def _dsn() -> str:
    """The test database as a URL for a child (a TCP server, or the embedded server's socket directory)."""
    return format_database_url(connection.settings_dict)


def _wait(condition: object, timeout_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if condition():  # type: ignore[operator]
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout_s}s")


def test_a_killed_handler_s_event_is_reenqueued_within_two_seconds(transactional_db: None) -> None:
    node = NodeFactory(devices=1)
    event = FailureEventFactory(
        node=node, task=None, kind="node_lost", severity="sev1", action="isolate_and_replan",
        detector="node_health",
    )  # fmt: skip
    with psycopg.connect(_dsn(), autocommit=False) as busy:  # another decision holds the lock
        busy.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
        env = {**os.environ, "DATABASE_URL": _dsn(), "UNICRON_ORCHESTRATION": "false"}
        worker = spawn([sys.executable, "-c", HANDLE.format(event_id=event.pk)], env=env)
        try:
            _wait(lambda: FailureEvent.objects.get(pk=event.pk).handling_claimed_at is not None, 30.0)
            time.sleep(1.5)  # the claim is old enough to be looked at
            assert do_reclaim_abandoned_handling() == []  # alive: waiting for the orchestration lock
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)
            reclaimed: list[int] = []

            def reenqueued() -> bool:
                reclaimed.extend(do_reclaim_abandoned_handling())
                return bool(reclaimed)

            elapsed = _wait(reenqueued, 5.0)
        finally:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGKILL)
        busy.rollback()
    assert reclaimed == [event.pk]
    assert elapsed < 2.5
    event.refresh_from_db()
    assert (event.handled_at, event.handling_claimed_at) == (None, None)


def test_a_handling_that_finishes_leaves_no_claim_to_reclaim(transactional_db: None) -> None:
    from controlplane.apps.planning.handling import handle_failure

    node = NodeFactory(devices=1)
    event = FailureEventFactory(node=node, task=None, kind="straggler", severity="sev2", action="none")
    assert handle_failure(event.pk).note == "no action"
    time.sleep(1.1)
    assert do_reclaim_abandoned_handling() == []
