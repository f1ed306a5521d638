"""Fixtures for the agent-link end-to-end tests: the real ASGI application, the real Redis channel
layer, the real PostgreSQL (transactional tests: the consumer reads and writes from its own threads)."""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator

from controlplane.apps.fleet.models import Node
from controlplane.apps.fleet.services import DeviceSpec, do_register_node
from controlplane.config.asgi import application
from controlplane.core.protocol import PROTOCOL_VERSION
from controlplane.live.stats_batch import stats_batch


@dataclass
class Registered:
    node: Node
    token: str

    @property
    def name(self) -> str:
        return self.node.name


@dataclass
class AgentSocket:
    """A fake agent's end of the link: frames in and out as plain JSON, like the wire."""

    comm: WebsocketCommunicator
    node: str
    session: str = field(default_factory=lambda: f"s-{uuid.uuid4().hex[:8]}")
    seq: int = 0

    async def send(self, message: dict[str, Any], **envelope: Any) -> int:
        self.seq += 1
        await self.comm.send_to(text_data=agent_frame(self.node, self.session, self.seq, message, **envelope))
        return self.seq

    async def send_raw(self, text: str) -> None:
        await self.comm.send_to(text_data=text)

    async def receive(self, timeout: float = 3.0) -> dict[str, Any]:
        frame: dict[str, Any] = json.loads(await self.comm.receive_from(timeout=timeout))
        return frame

    async def hello(self, devices: int = 2, kind: str = "cpu") -> None:
        await self.send(hello_message(devices, kind))

    async def heartbeat(self) -> None:
        await self.send({"type": "heartbeat", "uptime_s": 1.0})

    async def settle(self) -> None:
        """Wait until every frame sent so far was handled: a bad frame's reply comes back in order, and
        the iteration stats its link handed to the process's batch were stored."""
        await self.send_raw("not json")
        reply = await self.receive()
        assert reply["message"]["code"] == "malformed", reply
        await stats_batch().flushed()

    async def close(self) -> None:
        await self.comm.disconnect()


def agent_frame(node: str, session: str, seq: int, message: dict[str, Any], /, **envelope: Any) -> str:
    """An agent's frame as the wire carries it (``envelope``: fields to set or override)."""
    frame = {
        "protocol_version": PROTOCOL_VERSION,
        "node": node,
        "session": session,
        "seq": seq,
        "sent_at": datetime.now(UTC).isoformat(),
        "message": message,
        **envelope,
    }
    return json.dumps(frame)


def hello_message(devices: int = 2, kind: str = "cpu") -> dict[str, Any]:
    return {
        "type": "hello",
        "agent_version": "0.1.0-test",
        "hostname": "test-host",
        "worker_kind": "sim",
        "devices": [
            {"index": i, "kind": kind, "name": f"{kind}-slot-{i}", "memory_bytes": 0} for i in range(devices)
        ],
    }


def unique_name(prefix: str = "e2e") -> str:
    """Node names are unique per test run: Redis (and so the channel groups) is shared."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


Register = Callable[..., Registered]


@pytest.fixture
def register(transactional_db: None) -> Register:
    def make(name: str | None = None, devices: int = 0) -> Registered:
        specs = [DeviceSpec(index=i, kind="cpu-slot", memory_bytes=4 * 2**30) for i in range(devices)]
        node, token = do_register_node(None, name or unique_name(), devices=specs)
        return Registered(node, token)

    return make


@pytest.fixture
def registered(register: Callable[..., Registered]) -> Registered:
    return register()


Connect = Callable[..., Awaitable[AgentSocket]]


@pytest.fixture
async def connect(transactional_db: None) -> AsyncIterator[Connect]:
    """Open agent sockets against the real ASGI application; all are closed at the end."""
    opened: list[WebsocketCommunicator] = []

    async def open_socket(
        token: str | None, node: str, headers: list[tuple[bytes, bytes]] | None = None
    ) -> AgentSocket:
        if headers is None:
            headers = [(b"authorization", f"Bearer {token}".encode())] if token is not None else []
        comm = WebsocketCommunicator(application, "/ws/agent/", headers=headers)
        connected, _ = await comm.connect(timeout=5)
        assert connected
        opened.append(comm)
        return AgentSocket(comm, node)

    yield open_socket
    for comm in opened:
        with contextlib.suppress(Exception):  # already closed by the server
            await comm.disconnect()


# --------------------------------------------------------------------------------------------------
# The whole self-healing loop with real processes (tests/e2e/loop.py)
# --------------------------------------------------------------------------------------------------

LOOP_ENV = {
    "UNICRON_STEP_DEADLINE_S": "20",
    "UNICRON_RESUME_DEADLINE_S": "40",
    "UNICRON_SETTLE_WINDOW_S": "0.4",
    # a little more patience than production (3 s): the test machine's two cores are shared
    "UNICRON_LOST_AFTER_S": "5",
    "UNICRON_SUSPECT_AFTER_S": "3",
    "UNICRON_CHECKPOINT_INTERVAL": "20",
    "UNICRON_D_RUNNING_CAP_S": "600",
    "UNICRON_TRANSITION_RESTART_S": "30",
    "LOG_LEVEL": "INFO",
}


@pytest.fixture(scope="session")
def loop_server(django_db_setup: None, django_db_blocker: Any, tmp_path_factory: Any) -> Iterator[Any]:
    """A daphne serving the project's ASGI application on the test database (one per session; a test
    may kill and restart it: ``Loop.restart_asgi``)."""
    from django.conf import settings

    from tests.e2e.loop import AsgiServer, free_port, test_database_url

    with django_db_blocker.unblock():
        db_url = test_database_url()
    env = dict(
        os.environ,
        DATABASE_URL=db_url,
        REDIS_URL=settings.REDIS_URL,
        PYTHONPATH=str(Path(__file__).resolve().parents[2]),
        **LOOP_ENV,
    )
    server = AsgiServer(free_port(), env, tmp_path_factory.mktemp("daphne") / "daphne.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def loop(loop_server: Any, transactional_db: None, tmp_path: Path) -> Iterator[Any]:
    """Agents, a Celery worker (with beat) and the ASGI server around the test database."""
    import redis
    from django.conf import settings

    from tests.e2e.loop import Loop, seed_beat_schedule, test_database_url

    seed_beat_schedule()
    # stale messages of earlier runs
    redis.Redis.from_url(settings.REDIS_URL).delete("celery", "orchestration")
    env = dict(
        os.environ,
        DATABASE_URL=test_database_url(),
        REDIS_URL=settings.REDIS_URL,
        UNICRON_CHECKPOINT_ROOT=str(tmp_path / "ckpt"),
        PYTHONPATH=str(Path(__file__).resolve().parents[2]),
        **LOOP_ENV,
    )
    harness = Loop(loop_server.url, tmp_path, env, asgi=loop_server)
    harness.start_worker()
    try:
        yield harness
    finally:
        harness.close()


@pytest.fixture(autouse=True)
def _fresh_heartbeat_times() -> Iterator[None]:
    """Heartbeat times live in Redis (``fleet.last_seen``), which no test transaction rolls back: each test
    starts without the entries of earlier ones (node ids are reused across test databases)."""
    from controlplane.apps.fleet import last_seen

    def clear() -> None:
        with contextlib.suppress(Exception):
            last_seen.liveness_redis().delete(*last_seen.LIVENESS_KEYS)

    clear()
    yield
    clear()
