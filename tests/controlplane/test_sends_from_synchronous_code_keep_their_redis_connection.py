"""Channel-layer sends from synchronous code (a Celery task committing a failure's answer: the command's
wake-up and a dozen dashboard events) run on one event loop per process and keep its Redis connection: a
loop per send opened and closed a connection each time (3.9 ms a send). A forked child (a Celery pool
process) sends on a loop of its own, and the message arrives."""

from __future__ import annotations

import asyncio
import multiprocessing
from typing import Any

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

from controlplane.apps.common.broadcast import group_send

GROUP = "sync-sends-test"


def _connections_received() -> int:
    info: dict[str, Any] = redis.Redis.from_url(settings.REDIS_URL).info("stats")
    return int(info["total_connections_received"])


def test_twenty_sends_open_at_most_one_connection(db: None) -> None:
    group_send(GROUP, {"type": "test.message", "n": -1})  # the process's sender loop is up
    before = _connections_received()
    for n in range(20):
        group_send(GROUP, {"type": "test.message", "n": n})
    opened = _connections_received() - before - 1  # the count's own connection
    assert opened <= 1, f"{opened} connections opened for 20 sends"


async def _receive(layer: Any, channel: str) -> dict[str, Any]:
    message: dict[str, Any] = await asyncio.wait_for(layer.receive(channel), timeout=10)
    return message


def _send_in_child() -> None:
    group_send(GROUP, {"type": "test.message", "n": "from the child"})


@pytest.mark.django_db(transaction=True)
def test_a_forked_child_sends_on_a_loop_of_its_own() -> None:
    layer = get_channel_layer()
    assert layer is not None
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(GROUP, channel)
    try:
        group_send(GROUP, {"type": "test.message", "n": "from the parent"})
        assert async_to_sync(_receive)(layer, channel)["n"] == "from the parent"
        child = multiprocessing.get_context("fork").Process(target=_send_in_child)
        child.start()
        child.join(timeout=30)
        assert child.exitcode == 0
        assert async_to_sync(_receive)(layer, channel)["n"] == "from the child"
    finally:
        async_to_sync(layer.group_discard)(GROUP, channel)
