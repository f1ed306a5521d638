"""A handshake while the channel layer's Redis is unreachable is accepted and closed with the link's
"store unavailable" code, which the agent retries with back-off: no HTTP 500; and every code
the link closes with is an application code the WebSocket server can send (4000-4999)."""

from __future__ import annotations

import socket

import pytest
from channels.db import database_sync_to_async
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator
from django.db import connections
from django.test import override_settings

from controlplane.config.asgi import application
from controlplane.live import agent_link
from tests.e2e.conftest import Registered

pytestmark = pytest.mark.django_db(transaction=True)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # nothing listens there once the probe is closed


async def test_a_handshake_without_redis_is_closed_with_the_unavailable_code(registered: Registered) -> None:
    dead = f"redis://127.0.0.1:{_closed_port()}/0"
    layers = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": dead, "socket_connect_timeout": 1}]},
        }
    }
    with override_settings(CHANNEL_LAYERS=layers):
        channel_layers.backends.clear()
        try:
            comm = WebsocketCommunicator(
                application, "/ws/agent/", headers=[(b"authorization", f"Bearer {registered.token}".encode())]
            )
            connected, _ = await comm.connect(timeout=10)
            assert connected  # accepted, then closed: the agent sees a close code, not an HTTP 500
            closed = await comm.receive_output(timeout=10)
            assert closed == {"type": "websocket.close", "code": agent_link.CLOSE_STORE_UNAVAILABLE}
            await comm.wait(timeout=5)
        finally:
            channel_layers.backends.clear()
            # the refused link's token lookup left a connection on the database thread: close it there
            await database_sync_to_async(connections.close_all)()


def test_every_close_code_is_an_application_code() -> None:
    codes = {name: value for name, value in vars(agent_link).items() if name.startswith("CLOSE_")}
    assert codes, "no close code found"
    assert all(4000 <= code <= 4999 for code in codes.values()), codes
