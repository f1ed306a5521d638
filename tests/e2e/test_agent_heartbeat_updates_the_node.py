from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from channels.db import database_sync_to_async
from django.conf import settings

from controlplane.apps.fleet import last_seen
from controlplane.apps.fleet.choices import NodeState
from controlplane.apps.fleet.models import Node
from controlplane.apps.fleet.services import do_set_node_state
from tests.e2e.conftest import Connect, Registered, hello_message

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def get_node(pk: int) -> Node:
    return Node.objects.get(pk=pk)


@database_sync_to_async
def set_state(pk: int, state: str) -> None:
    """The watchdog's write path (which also tells the node's agent link)."""
    do_set_node_state(Node.objects.get(pk=pk), NodeState(state), "the watchdog found it silent")


async def test_a_heartbeat_moves_the_nodes_time_forward_in_redis_not_postgresql(
    registered: Registered, connect: Connect
) -> None:
    agent = await connect(registered.token, registered.name)
    await agent.hello()
    await agent.settle()
    row_after_hello = (await get_node(registered.node.pk)).last_heartbeat_at
    heard_at_hello = last_seen.last_seen([registered.node.pk])[registered.node.pk]

    await agent.heartbeat()
    await agent.settle()

    node = await get_node(registered.node.pk)
    assert last_seen.last_seen([node.pk])[node.pk] > heard_at_hello
    assert node.last_heartbeat_at == row_after_hello  # a healthy node's heartbeat writes no row
    assert node.state == "healthy"


async def test_a_heartbeat_from_a_suspect_node_makes_it_healthy_again(
    registered: Registered, connect: Connect
) -> None:
    agent = await connect(registered.token, registered.name)
    await agent.hello()
    await agent.settle()
    await set_state(registered.node.pk, "suspect")  # the watchdog found it silent for a while

    # the link hears of the verdict through the channel layer, beside the agent's frames: the heartbeats
    # that follow it (one a second from an agent; a tenth of a second here) bring the node back
    for _ in range(30):
        await agent.heartbeat()
        await agent.settle()
        if (await get_node(registered.node.pk)).state == "healthy":
            break
        await asyncio.sleep(0.1)

    assert (await get_node(registered.node.pk)).state == "healthy"


async def test_a_stale_heartbeat_brings_nothing_back(registered: Registered, connect: Connect) -> None:
    """A heartbeat that waited in a queue longer than the suspect deadline says nothing about now."""
    agent = await connect(registered.token, registered.name)
    await agent.hello()
    await agent.settle()
    await set_state(registered.node.pk, "suspect")
    await asyncio.sleep(0.5)  # the link hears of it

    sent = datetime.now(UTC) - timedelta(seconds=float(settings.UNICRON_SUSPECT_AFTER_S) + 5)
    await agent.send({"type": "heartbeat", "uptime_s": 1.0}, sent_at=sent.isoformat())
    await agent.settle()

    assert (await get_node(registered.node.pk)).state == "suspect"


async def test_an_agent_whose_clock_is_an_hour_behind_stays_healthy(
    registered: Registered, connect: Connect
) -> None:
    """Heartbeats are placed in the control plane's time by the offset the link learned."""
    agent = await connect(registered.token, registered.name)
    behind = timedelta(hours=1)
    hello = {**hello_message(), "type": "hello"}
    await agent.send(hello, sent_at=(datetime.now(UTC) - behind).isoformat())
    await agent.settle()
    await agent.send({"type": "heartbeat", "uptime_s": 1.0}, sent_at=(datetime.now(UTC) - behind).isoformat())
    await agent.settle()

    heard = last_seen.last_seen([registered.node.pk])[registered.node.pk]
    assert abs(heard - datetime.now(UTC).timestamp()) < 2.0
    assert (await get_node(registered.node.pk)).state == "healthy"
