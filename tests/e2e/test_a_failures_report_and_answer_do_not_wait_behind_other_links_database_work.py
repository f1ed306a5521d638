"""An ASGI process runs its agent links' database calls on one shared thread; a cold start of a fleet or
a burst of acknowledgements fills it for seconds. A failure's evidence and the commands that answer it
take the process's failure lane instead (``controlplane.live.failure_lane``).

Against a real daphne: one node's hello is held on the shared thread (its node row is locked by another
database session), and meanwhile another node's failure report is stored and an operator's command
reaches that node, though that node's own link has a frame (an ack) waiting for the shared thread too."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import psycopg
import pytest
from channels.db import database_sync_to_async
from websockets.asyncio.client import ClientConnection, connect

from controlplane.apps.fleet.models import Node
from controlplane.apps.fleet.services import do_drain_node
from controlplane.apps.incidents.models import FailureEvent
from tests.controlplane.factories import TaskFactory
from tests.e2e import loop as harness
from tests.e2e.conftest import Register, agent_frame, hello_message
from tests.e2e.loop import AsgiServer
from tests.e2e.test_worker_exception_becomes_one_classified_failure_event import cuda_exception, held_by

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

WITHIN_S = 3.0


class Agent:
    def __init__(self, ws: ClientConnection, node: str) -> None:
        self.ws, self.node, self.seq = ws, node, 0
        self.session = f"s-{uuid.uuid4().hex[:8]}"

    async def send(self, message: dict[str, Any]) -> None:
        self.seq += 1
        await self.ws.send(agent_frame(self.node, self.session, self.seq, message))

    async def command(self, kind: str, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                frame = json.loads(await asyncio.wait_for(self.ws.recv(), left))
            except TimeoutError:
                return None
            if frame["message"].get("type") == kind:
                return dict(frame["message"])
        return None


async def open_agent(server: AsgiServer, token: str, node: str) -> Agent:
    ws = await connect(server.url, additional_headers={"Authorization": f"Bearer {token}"})
    return Agent(ws, node)


async def test_a_failure_report_is_stored_and_a_command_sent_while_the_shared_thread_is_held(
    loop_server: AsgiServer, register: Register
) -> None:
    busy = await database_sync_to_async(register)()
    failing = await database_sync_to_async(register)(devices=2)
    task = await database_sync_to_async(TaskFactory)()
    await held_by(failing.node, task, [0])

    agent = await open_agent(loop_server, failing.token, failing.name)
    await agent.send(hello_message(2))
    for _ in range(200):
        if await database_sync_to_async(lambda: Node.objects.get(pk=failing.node.pk).state)() == "healthy":
            break
        await asyncio.sleep(0.05)

    lock = psycopg.connect(harness.test_database_url())  # another session holds the busy node's row
    try:
        lock.execute("SELECT id FROM fleet_node WHERE id = %s FOR UPDATE", [busy.node.pk])
        other = await open_agent(loop_server, busy.token, busy.name)
        await other.send(hello_message(2))
        await asyncio.sleep(0.5)  # its hello now waits for the lock, on the process's shared thread

        report_id = str(uuid.uuid4())
        sent = time.monotonic()
        await agent.send(cuda_exception(task.pk, report_id))
        stored_after = None
        while time.monotonic() - sent < WITHIN_S:
            if await database_sync_to_async(FailureEvent.objects.filter(report_id=report_id).exists)():
                stored_after = time.monotonic() - sent
                break
            await asyncio.sleep(0.02)

        # the failing node's link now has work of its own queued on the held thread
        await agent.send({"type": "ack", "command_id": str(uuid.uuid4()), "outcome": "done"})
        await asyncio.sleep(0.2)
        await database_sync_to_async(lambda: do_drain_node(None, Node.objects.get(pk=failing.node.pk)))()
        drain = await agent.command("drain", WITHIN_S)
        busy_state = await database_sync_to_async(lambda: Node.objects.get(pk=busy.node.pk).state)()
    finally:
        lock.rollback()
        lock.close()
    for _ in range(200):  # once the lock goes, the held hello goes through
        if await database_sync_to_async(lambda: Node.objects.get(pk=busy.node.pk).state)() == "healthy":
            break
        await asyncio.sleep(0.05)
    healthy_after = await database_sync_to_async(lambda: Node.objects.get(pk=busy.node.pk).state)()
    await agent.ws.close()
    await other.ws.close()

    assert busy_state != "healthy", "the busy node's hello was not held: the test proves nothing"
    assert stored_after is not None, "the failure report waited for the shared database thread"
    assert drain is not None, "the drain command waited for the shared database thread or the link's queue"
    assert healthy_after == "healthy"
