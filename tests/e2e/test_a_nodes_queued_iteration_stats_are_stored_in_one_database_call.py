"""The ASGI process runs every link's database work on one thread, each link's items in turn. A node with
many ranks sends several iteration stats a second; one call each let its queue grow at fleet size (9 s
behind at 2,048 nodes), and a failure report read behind them waited that out before it was stored. The
iteration stats queued together with nothing behind them are stored in one call, in order; a frame of
another kind closes the batch, so what is read after it is still handled after it."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from channels.db import database_sync_to_async

from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.training.models import TrainingTask
from controlplane.core.protocol import WorkerReport
from controlplane.live import agent_link
from tests.controlplane.factories import TaskFactory
from tests.e2e.conftest import Connect, Registered
from tests.e2e.test_iteration_stats_become_metric_samples import held_by, stats

pytestmark = pytest.mark.django_db(transaction=True)


def failure(task_pk: int, rank: int) -> dict[str, object]:
    now = datetime.now(UTC).isoformat()
    return {
        "type": "worker_report",
        "report_id": str(uuid.uuid4()),
        "task_id": str(task_pk),
        "epoch": 0,
        "rank": rank,
        "device": rank,
        "detector": "exception_propagation",
        "occurred_at": now,
        "detected_at": now,
        "event": {"kind": "exception", "exc_type": "RuntimeError", "message": "boom", "traceback": ""},
    }


async def test_queued_iteration_stats_are_stored_in_one_call_and_in_order(
    registered: Registered, connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    task: TrainingTask = await database_sync_to_async(TaskFactory)()
    agent = await connect(registered.token, registered.name)
    await agent.hello()
    await agent.settle()
    await held_by(registered.node, task, ranks=[0, 1])

    calls: list[list[str]] = []
    persist = agent_link._persist_reports

    def recording(node_id: int, reports: list[WorkerReport]) -> Any:
        calls.append([r.event.kind for r in reports])
        if len(calls) == 1:
            time.sleep(0.5)  # the database thread is busy: what the link reads meanwhile queues
        return persist(node_id, reports)

    monkeypatch.setattr(agent_link, "_persist_reports", recording)
    await agent.send(stats(task.pk, rank=0))
    for _ in range(8):
        await agent.send(stats(task.pk, rank=1))
    await agent.send(failure(task.pk, rank=1))
    await agent.send(stats(task.pk, rank=0))
    await agent.send(stats(task.pk, rank=1))
    await agent.settle()

    stats_kind = "iteration_stats"
    assert calls == [[stats_kind], [stats_kind] * 8, ["exception"], [stats_kind] * 2]
    events = await database_sync_to_async(lambda: FailureEvent.objects.filter(task=task).count())()
    assert events == 1
    samples = await database_sync_to_async(lambda: MetricSample.objects.filter(task=task).count())()
    assert samples > 0
