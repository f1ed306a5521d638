from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from controlplane.apps.fleet.models import Node
from tests.e2e.conftest import Connect, Registered

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def get_node(pk: int) -> Node:
    return Node.objects.get(pk=pk)


@database_sync_to_async
def set_state(pk: int, state: str) -> None:
    Node.objects.filter(pk=pk).update(state=state)


async def test_a_heartbeat_moves_last_heartbeat_forward(registered: Registered, connect: Connect) -> None:
    agent = await connect(registered.token, registered.name)
    await agent.hello()
    await agent.settle()
    after_hello = (await get_node(registered.node.pk)).last_heartbeat_at
    assert after_hello is not None

    await agent.heartbeat()
    await agent.settle()

    node = await get_node(registered.node.pk)
    assert node.last_heartbeat_at is not None
    assert node.last_heartbeat_at > after_hello
    assert node.state == "healthy"


async def test_a_heartbeat_from_a_suspect_node_makes_it_healthy_again(
    registered: Registered, connect: Connect
) -> None:
    agent = await connect(registered.token, registered.name)
    await agent.hello()
    await agent.settle()
    await set_state(registered.node.pk, "suspect")  # the watchdog found it silent for a while

    await agent.heartbeat()
    await agent.settle()

    assert (await get_node(registered.node.pk)).state == "healthy"
