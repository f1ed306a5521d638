"""A returning node whose agent is still warming (its warm spare workers are importing torch/megatron)
stays ``joining``: the planner places no rank on it and no ``node_joined`` re-plan is requested, until
a heartbeat says the agent is warm; then it becomes healthy and exactly one re-plan is requested. A
suspect node (same agent, link blip) becomes healthy at once, warming or not.

Re-plans are counted as the triggers ask for them: the requests they list in Redis (one message may plan
for many)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis
from channels.db import database_sync_to_async
from django.conf import settings

from controlplane.apps.common.triggers import REPLAN_REQUESTS_KEY, REPLAN_SENT_KEY
from controlplane.apps.fleet.choices import NodeState
from controlplane.apps.fleet.models import Node
from controlplane.apps.fleet.services import do_set_node_state
from tests.e2e.conftest import AgentSocket, Connect, Registered, hello_message

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "orchestration"  # where the re-plans are routed (settings.CELERY_TASK_ROUTES)


def node_joined_replans() -> int:
    """Re-plan requests with trigger ``node_joined`` listed so far (no worker plans for them here)."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    return sum(raw == b"node_joined" for raw in client.lrange(REPLAN_REQUESTS_KEY, 0, -1))


@pytest.fixture(autouse=True)
def empty_queue() -> Iterator[None]:
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(QUEUE, REPLAN_REQUESTS_KEY, REPLAN_SENT_KEY)
    yield
    client.delete(QUEUE, REPLAN_REQUESTS_KEY, REPLAN_SENT_KEY)


@database_sync_to_async
def state(pk: int) -> str:
    return str(Node.objects.get(pk=pk).state)


@database_sync_to_async
def set_state(pk: int, value: str) -> None:
    """The watchdog's write path (which also tells the node's agent link)."""
    do_set_node_state(Node.objects.get(pk=pk), NodeState(value), "the watchdog found it silent")


async def heartbeats_until(agent: AgentSocket, pk: int, expected: str, warming: bool) -> None:
    """Heartbeats once a tenth of a second (an agent sends one a second) until the node is ``expected``:
    the link hears of the state change through the channel layer, beside the agent's frames."""
    for _ in range(30):
        await heartbeat(agent, warming)
        if await state(pk) == expected:
            return
        await asyncio.sleep(0.1)


async def hello(agent: AgentSocket, warming: bool) -> None:
    await agent.send({**hello_message(), "worker_kind": "megatron", "warming": warming})
    await agent.settle()


async def heartbeat(agent: AgentSocket, warming: bool) -> None:
    await agent.send({"type": "heartbeat", "uptime_s": 1.0, "warming": warming})
    await agent.settle()


async def test_a_warming_hello_leaves_the_node_joining_until_a_heartbeat_says_warm(
    registered: Registered, connect: Connect
) -> None:
    pk = registered.node.pk
    assert await state(pk) == "joining"
    agent = await connect(registered.token, registered.name)

    await hello(agent, warming=True)
    assert await state(pk) == "joining"
    await heartbeat(agent, warming=True)
    await heartbeat(agent, warming=True)
    assert await state(pk) == "joining"
    assert node_joined_replans() == 0

    await heartbeat(agent, warming=False)
    assert await state(pk) == "healthy"
    assert node_joined_replans() == 1

    await heartbeat(agent, warming=False)
    assert await state(pk) == "healthy"
    assert node_joined_replans() == 1


async def test_a_lost_node_whose_agent_is_warming_only_rejoins(
    registered: Registered, connect: Connect
) -> None:
    pk = registered.node.pk
    await set_state(pk, "lost")
    agent = await connect(registered.token, registered.name)

    await hello(agent, warming=True)
    assert await state(pk) == "joining"
    assert node_joined_replans() == 0

    await heartbeat(agent, warming=False)
    assert await state(pk) == "healthy"
    assert node_joined_replans() == 1


async def test_a_lost_node_heartbeating_while_warming_only_rejoins(
    registered: Registered, connect: Connect
) -> None:
    pk = registered.node.pk
    agent = await connect(registered.token, registered.name)
    await hello(agent, warming=True)
    await set_state(pk, "lost")  # the watchdog gave up on it meanwhile

    await heartbeat(agent, warming=True)
    assert await state(pk) == "joining"
    assert node_joined_replans() == 0


async def test_a_suspect_node_becomes_healthy_at_once_even_while_its_agent_warms(
    registered: Registered, connect: Connect
) -> None:
    pk = registered.node.pk
    agent = await connect(registered.token, registered.name)
    await hello(agent, warming=False)
    assert await state(pk) == "healthy"
    await set_state(pk, "suspect")  # a link blip
    before = node_joined_replans()

    await heartbeats_until(agent, pk, "healthy", warming=True)
    assert await state(pk) == "healthy"
    assert node_joined_replans() == before + 1

    await set_state(pk, "suspect")
    await hello(agent, warming=True)  # the agent reconnected on a new socket
    assert await state(pk) == "healthy"
    assert node_joined_replans() == before + 2
