from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async

from controlplane.apps.fleet.choices import CommandType
from controlplane.apps.fleet.models import AgentCommand, Node
from controlplane.apps.fleet.services import do_enqueue_command
from controlplane.core.protocol import decode_coordinator_frame
from tests.e2e.conftest import AgentSocket, Connect, Registered

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def enqueue(node_pk: int, type: CommandType, payload: dict[str, object]) -> str:
    node = Node.objects.get(pk=node_pk)
    return str(do_enqueue_command(node, type, payload).command_id)


@database_sync_to_async
def rows() -> list[tuple[str, str, int]]:
    return [
        (str(c.command_id), c.state, c.attempts) for c in AgentCommand.objects.order_by("created_at", "id")
    ]


async def receive_commands(agent: AgentSocket, n: int) -> list[tuple[str, str]]:
    out = []
    for _ in range(n):
        frame = await agent.receive()
        decode_coordinator_frame(json.dumps(frame))  # a valid coordinator frame for the real agent
        assert frame["session"] == agent.session  # the coordinator echoes the agent's session
        out.append((frame["message"]["type"], frame["message"]["command_id"]))
    return out


async def test_unacked_commands_are_resent_in_order_on_reconnect_then_acked(
    registered: Registered, connect: Connect
) -> None:
    drain = await enqueue(registered.node.pk, CommandType.DRAIN, {"grace_s": 1.0})
    inject = await enqueue(
        registered.node.pk,
        CommandType.INJECT_FAULT,
        {"fault": {"kind": "crash", "rank": 0}},
    )

    first = await connect(registered.token, registered.name)
    await first.hello()
    assert await receive_commands(first, 2) == [("drain", drain), ("inject_fault", inject)]
    await first.close()  # the agent died before acknowledging anything
    assert [state for _, state, _ in await rows()] == ["sent", "sent"]

    second = await connect(registered.token, registered.name)
    await second.hello()
    assert await receive_commands(second, 2) == [("drain", drain), ("inject_fault", inject)]
    await second.send({"type": "ack", "command_id": drain, "outcome": "done"})
    await second.send({"type": "ack", "command_id": inject, "outcome": "accepted"})
    await second.send({"type": "ack", "command_id": drain, "outcome": "duplicate"})  # harmless
    await second.settle()

    assert await rows() == [(drain, "acked", 2), (inject, "acked", 2)]


async def test_a_command_enqueued_while_connected_is_pushed_at_once(
    registered: Registered, connect: Connect
) -> None:
    agent = await connect(registered.token, registered.name)
    await agent.hello()
    await agent.settle()

    command_id = await enqueue(registered.node.pk, CommandType.DRAIN, {})

    assert await receive_commands(agent, 1) == [("drain", command_id)]
    await agent.send(
        {"type": "ack", "command_id": command_id, "outcome": "stale_epoch", "detail": "epoch 3 < 4"}
    )
    await agent.settle()
    [(_, state, attempts)] = await rows()
    assert (state, attempts) == ("failed", 1)


async def test_an_ack_for_a_command_of_another_node_is_refused(
    registered: Registered, connect: Connect
) -> None:
    other = await database_sync_to_async(Node.objects.create)(
        name=f"{registered.name}-x", token_hash="0" * 64
    )
    foreign = await enqueue(other.pk, CommandType.DRAIN, {})
    agent = await connect(registered.token, registered.name)
    await agent.hello()

    await agent.send({"type": "ack", "command_id": foreign, "outcome": "done"})
    reply = (await agent.receive())["message"]

    assert (reply["code"], foreign in reply["detail"]) == ("invalid", True)
    assert [state for _, state, _ in await rows()] == ["pending"]
