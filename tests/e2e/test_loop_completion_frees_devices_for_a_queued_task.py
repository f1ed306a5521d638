"""Completion (sim agents): when every rank of a task exits after its last iteration the task is
completed, its devices are released and the re-plan starts the task that was queued for them."""

from __future__ import annotations

import pytest

from controlplane.apps.planning.models import Plan
from controlplane.apps.training.models import Allocation, TrainingTask
from tests.e2e.loop import Loop, assert_allocations_consistent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_completion(loop: Loop) -> None:
    loop.add_node(2)
    loop.add_node(2)
    loop.wait_nodes_healthy(2)
    short = loop.submit("short", min_workers=4, max_workers=4, total_iterations=60)
    loop.wait_running(short)
    queued = loop.submit("queued", min_workers=4, max_workers=4, total_iterations=100000)
    loop.wait(
        "the second task queued with a reason",
        lambda: TrainingTask.objects.filter(pk=queued.pk, state="pending").exclude(pending_reason="").first(),
        timeout=30,
    )
    done = loop.wait(
        "the first task completed",
        lambda: TrainingTask.objects.filter(pk=short.pk, state="completed").first(),
        timeout=90,
    )
    assert done.finished_at is not None
    assert done.iteration >= 59
    assert not Allocation.objects.filter(task=short, active=True).exists()
    loop.wait("the re-plan after completion", lambda: Plan.objects.filter(trigger="task_finished").exists())
    loop.wait_running(queued, timeout=60)
    queued.refresh_from_db()
    assert queued.state == "running"
    assert queued.pending_reason == ""
    assert Allocation.objects.filter(task=queued, active=True).count() == 4
    assert_allocations_consistent()
