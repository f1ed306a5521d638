"""Three tasks of different weights (sim agents): losing a node takes the devices of the task whose loss
costs the least weighted FLOP/s (it is suspended, with an alert); the node's return grows it back."""

from __future__ import annotations

import pytest

from controlplane.apps.incidents.models import Alert
from controlplane.apps.planning.models import Plan
from controlplane.apps.training.models import Allocation, TrainingTask
from tests.e2e.loop import Loop, assert_allocations_consistent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def counts() -> dict[str, int]:
    return {
        t.name: Allocation.objects.filter(task=t, active=True).count()
        for t in TrainingTask.objects.order_by("pk")
    }


def test_loss_and_return(loop: Loop) -> None:
    nodes = [loop.add_node(2) for _ in range(3)]
    loop.wait_nodes_healthy(3)
    tasks = {
        w: loop.submit(f"w{w}", weight=float(w), min_workers=2, max_workers=2, total_iterations=100000)
        for w in (1, 4, 10)
    }
    for t in tasks.values():
        loop.wait_running(t)
    assert counts() == {"w1": 2, "w4": 2, "w10": 2}
    holder = Allocation.objects.select_related("device__node").get(task=tasks[10], active=True, rank=0)
    victim = holder.device.node
    loop.kill_agent(victim.name)  # the node dies: agent and workers at once

    def suspended() -> bool:
        return (
            TrainingTask.objects.get(pk=tasks[1].pk).state == "suspended"
            and all(TrainingTask.objects.get(pk=tasks[w].pk).state == "running" for w in (4, 10))
            and counts() == {"w1": 0, "w4": 2, "w10": 2}
        )

    loop.wait("w1 suspended, w4 and w10 running on 2 devices each", suspended, timeout=90)
    plan = Plan.objects.filter(trigger="failure").latest("id")
    by_task = {d["task"]: d for d in plan.decisions}
    assert by_task[tasks[1].pk]["new_workers"] == 0
    assert by_task[tasks[10].pk]["new_workers"] == 2
    assert Alert.objects.filter(message__contains="suspended below its minimum").exists()
    w1 = TrainingTask.objects.get(pk=tasks[1].pk)
    assert w1.pending_reason.startswith("suspended")
    assert not Allocation.objects.filter(active=True, device__node=victim).exists(), loop.diagnose()
    assert_allocations_consistent()

    loop.start_agent(victim.name)  # repaired
    loop.wait(
        "w1 running again on 2 devices",
        lambda: TrainingTask.objects.get(pk=tasks[1].pk).state == "running"
        and counts() == {"w1": 2, "w4": 2, "w10": 2},
        timeout=90,
    )
    assert Plan.objects.filter(trigger="node_joined", id__gt=plan.pk).exists()
    assert_allocations_consistent()
    assert {n.name for n in nodes} >= {victim.name}
