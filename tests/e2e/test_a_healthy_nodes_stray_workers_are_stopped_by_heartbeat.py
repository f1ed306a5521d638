"""A healthy node whose heartbeats keep listing workers of a task that has no allocation on it (a
command lost, a restarted agent given an old order) is told to stop them, through its own link: the
heartbeat's worker list is reconciled with the allocations every few seconds, and a stray seen in two
readings in a row is stopped."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from controlplane.apps.training.models import TrainingTask
from controlplane.live import link_liveness
from tests.controlplane.factories import TaskFactory
from tests.e2e.conftest import Connect, Registered

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def running_task_placed_nowhere() -> TrainingTask:
    task: TrainingTask = TaskFactory(state="running", epoch=3)
    return task


def heartbeat(task: TrainingTask) -> dict[str, object]:
    workers = [
        {"task_id": str(task.pk), "epoch": 2, "rank": r, "device": r, "pid": 4000 + r, "state": "healthy"}
        for r in range(2)
    ]
    return {"type": "heartbeat", "uptime_s": 5.0, "workers": workers}


async def test_workers_listed_twice_without_an_allocation_get_a_stop_command(
    registered: Registered, connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(link_liveness, "WORKERS_RECONCILED_EVERY_S", 0.0)
    task = await running_task_placed_nowhere()
    agent = await connect(registered.token, registered.name)
    await agent.hello()
    await agent.settle()

    await agent.send(heartbeat(task))
    await agent.settle()  # one reading: a transition may be on its way, nothing is sent
    await agent.send(heartbeat(task))
    frame = await agent.receive(timeout=5.0)

    message = frame["message"]
    assert (message["type"], message["task_id"], message["epoch"]) == ("stop_workers", str(task.pk), 3)
    assert message["ranks"] is None
    assert message["task_ended"] is False


async def test_a_link_that_lists_no_workers_reconciles_nothing(
    registered: Registered, connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(link_liveness, "WORKERS_RECONCILED_EVERY_S", 0.0)
    agent = await connect(registered.token, registered.name)
    await agent.hello()
    await agent.settle()
    for _ in range(3):
        await agent.heartbeat()
    await agent.settle()  # its reply is the only frame: no command came
