"""A node's token lets it report only for the ranks it runs: reports about another node's task (an
iteration of 10^15, a failure, a finished rank) and snapshot adverts of a task it never ran are refused
with ``forbidden``, audited, and change nothing; the planner ignores snapshot lists of such nodes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from channels.db import database_sync_to_async

from controlplane.apps.accounts.models import AuditEntry
from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.training.models import Allocation, TrainingTask
from tests.controlplane.factories import TaskFactory
from tests.e2e import conftest as e2e
from tests.e2e.conftest import Connect, Register, Registered

connect, register = e2e.connect, e2e.register  # the agent-link fixtures

pytestmark = pytest.mark.django_db(transaction=True)


def report(task: int, event: dict[str, Any], rank: int = 0, epoch: int = 1) -> dict[str, Any]:
    now = datetime.now(UTC).isoformat()
    return {
        "type": "worker_report",
        "report_id": str(uuid.uuid4()),
        "task_id": str(task),
        "epoch": epoch,
        "rank": rank,
        "device": 0,
        "detector": None,
        "occurred_at": now,
        "detected_at": now,
        "event": event,
    }


STATS = {
    "kind": "iteration_stats",
    "first_iteration": 10**15 - 1,
    "last_iteration": 10**15,
    "iterations": 2,
    "median_s": 0.5,
    "max_s": 0.6,
    "compute_median_s": 0.4,
    "micro_batches": 8,
    "tokens": 2048,
    "model_flops": 8e9,
}
CRASH = {"kind": "exited", "exit_code": -9, "signal": 9, "signal_name": "SIGKILL", "expected": False}
FINISHED = {"kind": "exited", "exit_code": 0, "expected": True}
TRANSITION = {"kind": "transition", "from_epoch": 0, "iteration": 10**15, "in_place": False, "source": "none"}


@database_sync_to_async
def task_on(owner: Registered) -> TrainingTask:
    """A running task whose only rank (0, epoch 1) is on ``owner``'s device 0."""
    task: TrainingTask = TaskFactory(state="running", epoch=1, iteration=5, total_iterations=100)
    device = Device.objects.get(node=owner.node, index=0)
    Allocation.objects.create(task=task, device=device, rank=0, epoch=1)
    return task


@database_sync_to_async
def state_of(task: TrainingTask, node: Node) -> dict[str, Any]:
    t = TrainingTask.objects.get(pk=task.pk)
    return {
        "iteration": t.iteration,
        "state": t.state,
        "failures": FailureEvent.objects.count(),
        "finished": Allocation.objects.filter(task=t, finished_at__isnull=False).count(),
        "active": Allocation.objects.filter(task=t, active=True).count(),
        "snapshots": Node.objects.get(pk=node.pk).snapshots,
        "audits": sorted(
            AuditEntry.objects.filter(object_id=str(node.pk), verb__startswith="agent_").values_list(
                "verb", flat=True
            )
        ),
    }


async def test_reports_and_adverts_about_another_nodes_task_are_refused_and_change_nothing(
    register: Register, connect: Connect
) -> None:
    owner = await database_sync_to_async(register)(devices=1)
    intruder = await database_sync_to_async(register)(devices=1)
    task = await task_on(owner)
    agent = await connect(intruder.token, intruder.name)
    await agent.hello(devices=1)
    await agent.settle()
    before = await state_of(task, intruder.node)

    codes = []
    for event in (STATS, CRASH, FINISHED, TRANSITION):
        seq = await agent.send(report(task.pk, event))
        reply = (await agent.receive())["message"]
        assert reply["in_reply_to_seq"] == seq
        codes.append(reply["code"])
    advert = {
        "task_id": str(task.pk),
        "epoch": 1,
        "iteration": 4,
        "ranks": [0],
        "origin_node": owner.name,
        "nbytes": 1 << 30,
    }
    await agent.send({"type": "heartbeat", "uptime_s": 2.0, "snapshots": [advert]})
    codes.append((await agent.receive())["message"]["code"])
    await agent.settle()

    assert codes == ["forbidden"] * 5
    after = await state_of(task, intruder.node)
    assert after["audits"] == ["agent_report_refused"] * 4 + ["agent_snapshot_refused"]
    assert {k: v for k, v in after.items() if k != "audits"} == {
        k: v for k, v in before.items() if k != "audits"
    }
    assert (after["iteration"], after["state"], after["snapshots"]) == (5, "running", [])


async def test_the_node_that_runs_the_rank_is_still_heard(register: Register, connect: Connect) -> None:
    owner = await database_sync_to_async(register)(devices=1)
    task = await task_on(owner)
    agent = await connect(owner.token, owner.name)
    await agent.hello(devices=1)
    await agent.send_raw("not json")
    grant = (await agent.receive())["message"]  # the key of the task it runs, then the refusal
    assert (grant["type"], grant["task_id"]) == ("snapshot_grant", str(task.pk))
    assert (await agent.receive())["message"]["code"] == "malformed"

    await agent.send(report(task.pk, {**STATS, "first_iteration": 6, "last_iteration": 7}))
    await agent.settle()

    assert (await state_of(task, owner.node))["iteration"] == 7


@database_sync_to_async
def planner_sources(task: TrainingTask, stranger: Registered, owner: Registered) -> list[str]:
    from controlplane.apps.planning.selectors import load_cluster
    from controlplane.apps.planning.sources import snapshot_copies

    TrainingTask.objects.filter(pk=task.pk).update(parallel_config={"tp": 1, "pp": 1, "dp": 1})
    task.refresh_from_db()
    info = {"task_id": str(task.pk), "epoch": 1, "iteration": 4, "ranks": [0], "nbytes": 10}
    # rows as an older coordinator stored them: both nodes list a copy of the task
    Node.objects.filter(pk=stranger.node.pk).update(
        snapshots=[{**info, "origin_node": owner.name}], snapshot_endpoint="127.0.0.1:1", state="healthy"
    )
    Node.objects.filter(pk=owner.node.pk).update(
        snapshots=[{**info, "origin_node": owner.name}], snapshot_endpoint="127.0.0.1:2", state="healthy"
    )
    return sorted(c.node for c in snapshot_copies(task, load_cluster(), (1, 1)))


async def test_the_planner_takes_snapshots_only_from_nodes_that_ran_the_task(register: Register) -> None:
    owner = await database_sync_to_async(register)(devices=1)
    stranger = await database_sync_to_async(register)(devices=1)
    task = await task_on(owner)

    assert await planner_sources(task, stranger, owner) == [owner.name]
