"""A cold start of a fleet queues every node's hello on the ASGI process's one database thread. A node
whose hello was applied must not fall silent to the watchdog while the rest of its link's database work
(its pending commands, here) waits behind the other nodes': its heartbeats are recorded as they arrive."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from controlplane.apps.fleet import last_seen
from controlplane.live import agent_link
from tests.e2e.conftest import Connect, Registered

pytestmark = pytest.mark.django_db(transaction=True)

HELD_S = 3.0


async def test_heartbeats_reach_redis_while_the_links_database_work_is_held(
    registered: Registered, connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    applied = threading.Event()
    read_outbox = agent_link.read_outbox

    def held_read_outbox(node_id: int) -> object:
        applied.set()  # the hello is applied: the node is healthy and watched from here on
        release.wait(HELD_S)  # on the database thread: everything behind it waits too
        return read_outbox(node_id)

    monkeypatch.setattr(agent_link, "read_outbox", held_read_outbox)
    agent = await connect(registered.token, registered.name)
    await agent.hello()
    while not applied.is_set():
        await asyncio.sleep(0.01)
    node = registered.node.pk
    for _ in range(100):  # the hello's stamp reaches Redis with the next batch
        if node in last_seen.last_seen([node]):
            break
        await asyncio.sleep(0.01)
    heard_at_hello = last_seen.last_seen([node])[node]

    seen = []
    for _ in range(4):  # 2 s of heartbeats while the database thread is held
        await asyncio.sleep(0.5)
        await agent.heartbeat()
        await asyncio.sleep(0.05)
        seen.append(last_seen.last_seen([node])[node])
    still_held = not release.is_set()
    release.set()
    await agent.settle()

    assert still_held
    assert seen[-1] > heard_at_hello + 1.5  # each heartbeat moved the node's time forward
    assert time.time() - seen[-1] < 1.0


async def test_heartbeats_do_not_pile_up_behind_the_links_held_database_work(
    registered: Registered, connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the newest heartbeat's database part waits: a link whose database work is held for seconds
    (a cold start of thousands of nodes) would otherwise queue every heartbeat it reads meanwhile."""
    release = threading.Event()
    applied = threading.Event()
    read_outbox = agent_link.read_outbox

    def held_read_outbox(node_id: int) -> object:
        applied.set()
        release.wait(HELD_S)
        return read_outbox(node_id)

    handled: list[int] = []
    on_heartbeat = agent_link.AgentLinkConsumer._on_heartbeat

    async def counted(self: agent_link.AgentLinkConsumer, envelope: object) -> None:
        handled.append(1)
        await on_heartbeat(self, envelope)  # type: ignore[arg-type]

    monkeypatch.setattr(agent_link, "read_outbox", held_read_outbox)
    monkeypatch.setattr(agent_link.AgentLinkConsumer, "_on_heartbeat", counted)
    agent = await connect(registered.token, registered.name)
    await agent.hello()
    while not applied.is_set():
        await asyncio.sleep(0.01)
    for _ in range(20):
        await agent.heartbeat()
    await asyncio.sleep(0.2)
    release.set()
    await agent.settle()

    assert len(handled) == 1
