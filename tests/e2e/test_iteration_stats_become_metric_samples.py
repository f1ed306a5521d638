from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from channels.db import database_sync_to_async
from django.db import DataError, OperationalError

from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.metrics.ingest import Ingested
from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.core.protocol import WorkerReport
from controlplane.live import stats_batch as stats_batch_module
from tests.controlplane.factories import TaskFactory
from tests.e2e.conftest import Connect, Registered

pytestmark = pytest.mark.django_db(transaction=True)


def stats(task_pk: int, rank: int) -> dict[str, object]:
    now = datetime.now(UTC).isoformat()
    return {
        "type": "worker_report",
        "report_id": str(uuid.uuid4()),
        "task_id": str(task_pk),
        "epoch": 0,
        "rank": rank,
        "device": rank,
        "detector": None,
        "occurred_at": now,
        "detected_at": now,
        "event": {
            "kind": "iteration_stats",
            "first_iteration": 10,
            "last_iteration": 17,
            "iterations": 8,
            "median_s": 0.5,
            "max_s": 0.6,
            "compute_median_s": 0.4,
            "micro_batches": 32,
            "tokens": 2048,
            "model_flops": 8e9,
        },
    }


@database_sync_to_async
def held_by(node: Node, task: TrainingTask, ranks: list[int]) -> None:
    """``node`` runs ``ranks`` of ``task`` at epoch 0 (released: the task is not running anywhere)."""
    for rank in ranks:
        device = Device.objects.get(node=node, index=rank)
        Allocation.objects.create(task=task, device=device, rank=rank, epoch=0, active=False)


async def test_rank_zero_iteration_stats_become_the_tasks_samples(
    registered: Registered, connect: Connect
) -> None:
    task: TrainingTask = await database_sync_to_async(TaskFactory)()
    agent = await connect(registered.token, registered.name)
    await agent.hello()
    await agent.settle()
    await held_by(registered.node, task, ranks=[0, 1])  # the node may speak only for its ranks

    await agent.send(stats(task.pk, rank=0))
    await agent.send(stats(task.pk, rank=1))  # same interval seen by another rank: not a second sample
    await agent.settle()

    samples = await database_sync_to_async(
        lambda: sorted(MetricSample.objects.filter(task=task).values_list("kind", "value", "iteration"))
    )()
    # no active allocations: one rank's share; 2048 tokens / 8 iterations / 0.5 s = 512 tokens/s
    assert samples == [("achieved_flops", 2e9, 17), ("iteration_time", 0.5, 17), ("tokens_per_s", 512.0, 17)]


async def test_stats_the_database_cannot_take_are_kept_and_one_it_refuses_is_answered(
    registered: Registered, connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While PostgreSQL is unreachable the process's batch of stats is kept and stored once it is back;
    a report the database refuses on its own is answered to its link, and the rest of its batch stored."""
    task: TrainingTask = await database_sync_to_async(TaskFactory)()
    agent = await connect(registered.token, registered.name)
    await agent.hello()
    await agent.settle()
    await held_by(registered.node, task, ranks=[0, 1])
    real = stats_batch_module.record_iteration_stats_batch
    calls: list[int] = []

    def store(reports: list[WorkerReport]) -> Ingested:
        calls.append(len(reports))
        if len(calls) == 1:
            raise OperationalError("connection refused")
        if any(r.rank == 1 and r.event.kind == "iteration_stats" for r in reports):
            raise DataError("value out of range")  # refused for this report alone
        return real(reports)

    monkeypatch.setattr(stats_batch_module, "record_iteration_stats_batch", store)
    await agent.send(stats(task.pk, rank=0))
    refused_seq = await agent.send(stats(task.pk, rank=1))
    await agent.settle()  # the first try failed: kept for the next
    assert await database_sync_to_async(MetricSample.objects.filter(task=task).count)() == 0

    reply = await agent.receive(timeout=5.0)  # the retry: rank 1's report refused, rank 0's stored
    assert reply["message"]["code"] == "invalid", reply
    assert reply["message"]["in_reply_to_seq"] == refused_seq
    assert "value out of range" in reply["message"]["detail"]
    assert calls == [2, 2, 1, 1]
    assert await database_sync_to_async(MetricSample.objects.filter(task=task).count)() == 3


async def test_a_ranks_last_stats_are_counted_before_its_exit_completes_the_task(
    registered: Registered, connect: Connect
) -> None:
    """Stats wait for the process's batch while the link goes on, but a rank's exit waits for them: the
    task completes with its last iterations counted, not a batch later."""
    task: TrainingTask = await database_sync_to_async(TaskFactory)(state="running")
    agent = await connect(registered.token, registered.name)
    await agent.hello()
    await agent.settle()

    @database_sync_to_async
    def runs_rank_zero() -> None:
        device = Device.objects.get(node=registered.node, index=0)
        Allocation.objects.create(task=task, device=device, rank=0, epoch=0, active=True)

    await runs_rank_zero()
    await agent.send(stats(task.pk, rank=0))  # iterations 10..17
    exited = {**stats(task.pk, rank=0), "event": {"kind": "exited", "exit_code": 0, "expected": True}}
    await agent.send(exited)
    await agent.send_raw("not json")  # answered once both were handled, without waiting for the batch
    assert (await agent.receive())["message"]["code"] == "malformed"

    done = await database_sync_to_async(TrainingTask.objects.get)(pk=task.pk)
    assert (done.state, done.iteration) == ("completed", 17)
