"""The snapshot key of a task reaches, besides the agents that run it (in their commands), the replica
peer a launch of the task names (a ``snapshot_grant`` after its hello); a node with no part in the task
gets no key of it."""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async

from controlplane.apps.fleet.choices import CommandType
from controlplane.apps.fleet.services import do_enqueue_command
from controlplane.apps.training.models import TrainingTask
from tests.controlplane.factories import TaskFactory
from tests.e2e import conftest as e2e
from tests.e2e.conftest import Connect, Register, Registered, hello_message

connect, register = e2e.connect, e2e.register  # the agent-link fixtures

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def launched_with_replica(runner: Registered, replica_endpoint: str) -> TrainingTask:
    task: TrainingTask = TaskFactory(state="running", epoch=1)
    do_enqueue_command(
        runner.node,
        CommandType.START_WORKERS,
        {"launch": {"snapshot_replica": replica_endpoint}},
        task.pk,
        1,
    )
    return task


async def frames_after_hello(agent: Any, endpoint: str) -> list[dict[str, Any]]:
    await agent.send({**hello_message(1), "snapshot_endpoint": endpoint})
    await agent.send_raw("not json")
    out = []
    while (m := (await agent.receive())["message"]).get("code") != "malformed":
        out.append(m)
    return out


async def test_only_the_named_replica_peer_gets_the_key(register: Register, connect: Connect) -> None:
    runner = await database_sync_to_async(register)(devices=1)
    peer = await database_sync_to_async(register)(devices=1)
    stranger = await database_sync_to_async(register)(devices=1)
    task = await launched_with_replica(runner, "10.1.1.2:7000")

    peer_frames = await frames_after_hello(await connect(peer.token, peer.name), "10.1.1.2:7000")
    stranger_frames = await frames_after_hello(await connect(stranger.token, stranger.name), "10.1.1.3:7000")

    assert peer_frames == [
        {"type": "snapshot_grant", "task_id": str(task.pk), "secret": task.snapshot_secret}
    ]
    assert stranger_frames == []
