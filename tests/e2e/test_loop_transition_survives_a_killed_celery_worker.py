"""Killing the Celery worker mid-transition leaves no transition stuck and no device in two active
allocations: the rows carry the state; after the restart, queued acks/reports and the beat watchdog
complete it (or roll it back)."""

from __future__ import annotations

import time

import pytest

from controlplane.apps.planning.models import Transition
from tests.e2e.loop import Loop, assert_allocations_consistent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_worker_killed_mid_transition(loop: Loop) -> None:
    loop.add_node(2)
    loop.add_node(2)
    loop.wait_nodes_healthy(2)
    task = loop.submit("k", min_workers=1, max_workers=4, total_iterations=100000)
    loop.wait_running(task)
    loop.wait("progress", lambda: (task.refresh_from_db(), task.iteration > 3)[1])
    task.refresh_from_db()
    epoch = task.epoch
    loop.inject(task, "crash", rank=0)
    running = loop.wait(
        "the restart transition running",
        lambda: Transition.objects.filter(task=task, epoch__gt=epoch, state="running").first(),
        timeout=30,
    )
    loop.kill_worker()
    time.sleep(3.0)  # agents ack and report meanwhile; only the worker can complete the transition
    running.refresh_from_db()
    assert running.state == "running", "completed without a worker?"
    assert_allocations_consistent()
    loop.start_worker()
    done = loop.wait(
        "the transition completed or rolled back after the restart",
        lambda: Transition.objects.filter(pk=running.pk, state__in=["completed", "rolled_back"]).first(),
        timeout=60,
    )
    assert done.state == "completed"
    task.refresh_from_db()
    assert task.state == "running"
    assert task.epoch == done.epoch
    assert_allocations_consistent()
    assert not Transition.objects.filter(state__in=["pending", "running"]).exists()
