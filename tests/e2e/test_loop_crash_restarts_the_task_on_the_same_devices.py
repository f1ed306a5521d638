"""A worker crash (sim agents): process supervision → sev2 → restart on the same devices at a new
epoch → training resumes; every row is there and no device is in two active allocations."""

from __future__ import annotations

import pytest

from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.planning.models import Plan, Transition
from controlplane.apps.training.models import Allocation
from tests.e2e.loop import Loop, assert_allocations_consistent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_crash(loop: Loop) -> None:
    loop.add_node(2)
    loop.add_node(2)
    loop.wait_nodes_healthy(2)
    task = loop.submit("crash", min_workers=1, max_workers=4, total_iterations=100000)
    launch = loop.wait_running(task)
    assert launch.kind == "launch"
    assert Plan.objects.filter(trigger="task_submitted").exists()
    task.refresh_from_db()
    devices_before = sorted(
        Allocation.objects.filter(task=task, active=True).values_list("device_id", "rank")
    )
    assert len(devices_before) == 4
    loop.wait("progress", lambda: (task.refresh_from_db(), task.iteration > 3)[1])
    task.refresh_from_db()
    epoch, failed_at = task.epoch, task.iteration

    loop.inject(task, "crash", rank=1)
    ev = loop.wait(
        "the crash event",
        lambda: FailureEvent.objects.filter(task=task, detector="process_supervision").first(),
        timeout=30,
    )
    assert ev.severity == "sev2"
    assert ev.action == "restart_processes"
    assert ev.task_epoch == epoch
    restart = loop.wait_running(task, epoch_above=epoch, timeout=60)
    assert restart.kind == "restart"
    assert restart.failure_event_id == ev.pk
    assert [s.state for s in restart.steps.order_by("order")] == ["done", "done"]
    reconfigure = restart.steps.get(name="reconfigure")
    assert {tuple(x) for x in reconfigure.detail["survivors"]} == {(0, 0), (2, 2), (3, 3)}  # rank 1 failed
    ev.refresh_from_db()
    assert ev.resolved_at is not None
    assert ev.handled_by_id == ev.pk
    assert restart.detection_latency_s is not None
    assert restart.detection_latency_s < 2.0
    assert "total" in restart.phases_s
    task.refresh_from_db()
    assert task.state == "running"
    assert task.epoch == restart.epoch
    devices_after = sorted(Allocation.objects.filter(task=task, active=True).values_list("device_id", "rank"))
    assert devices_after == devices_before  # same devices, same ranks
    loop.wait(
        "iterations past the failure at the new epoch",
        lambda: (task.refresh_from_db(), task.iteration > failed_at + 3)[1],
    )
    assert Transition.objects.filter(task=task, state="completed").count() == 2
    assert_allocations_consistent()
