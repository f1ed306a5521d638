"""An agent that restarts faster than the node-loss timeout (sim agents): its workers died with it and
their exit reports were never sent; the hello of the new agent process shows the ranks missing, which
becomes a sev2 failure and a restart at a new epoch — the task does not silently run short."""

from __future__ import annotations

import pytest

from controlplane.apps.fleet.models import Node
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.training.models import Allocation
from tests.e2e.loop import Loop, assert_allocations_consistent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_agent_restart(loop: Loop) -> None:
    loop.add_node(2)
    loop.add_node(2)
    loop.wait_nodes_healthy(2)
    task = loop.submit("r", min_workers=1, max_workers=4, total_iterations=100000)
    loop.wait_running(task)
    loop.wait("progress", lambda: (task.refresh_from_db(), task.iteration > 3)[1])
    task.refresh_from_db()
    epoch, before = task.epoch, task.iteration
    node = Allocation.objects.select_related("device__node").get(task=task, active=True, rank=0).device.node
    loop.kill_agent(node.name)
    loop.start_agent(node.name)  # back well within UNICRON_LOST_AFTER_S
    missing = loop.wait(
        "the missing ranks reported",
        lambda: FailureEvent.objects.filter(task=task, task_epoch=epoch, kind="worker_missing").first(),
        timeout=60,
    )
    assert missing.severity == "sev2"
    assert missing.action == "restart_processes"
    assert FailureEvent.objects.filter(task=task, task_epoch=epoch, kind="worker_missing").count() == 2
    assert not FailureEvent.objects.filter(kind="node_lost").exists()
    assert Node.objects.get(pk=node.pk).state == "healthy"
    restart = loop.wait_running(task, epoch_above=epoch, timeout=60)
    assert restart.kind == "restart"
    loop.wait("progress at the new epoch", lambda: (task.refresh_from_db(), task.iteration > before + 2)[1])
    assert_allocations_consistent()
