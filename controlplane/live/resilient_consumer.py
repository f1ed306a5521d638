"""A WebSocket consumer that outlives its channel layer (Redis) and never hops to the database thread
for nothing.

Channels' own consumer loop ends the consumer when a read of the channel layer raises, and its
``dispatch`` first runs ``aclose_old_connections`` on the process's one database thread. The agent link
cannot afford either: a Redis outage must not drop every node's link (heartbeats then go to PostgreSQL,
and the commands a link would have been woken for stay in the outbox until Redis is back or the agent
reconnects), and the hop put each heartbeat behind every database call queued in the process, which
at a cold start of a fleet silenced healthy nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import redis
from channels.consumer import get_handler_name
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from channels.utils import await_many_dispatch

log = logging.getLogger(__name__)

LAYER_RETRY_MAX_S = 10.0
"""The longest pause between two reads of an unreachable channel layer (it doubles from 0.5 s)."""


class ResilientConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]
    """Channels' consumer loop with the channel layer read through :meth:`_channel_receive` (an
    unreachable layer is retried with back-off, never fatal) and :meth:`dispatch` without the database
    hop. Every database call of a subclass must be a ``database_sync_to_async`` call (which closes stale
    connections itself). :meth:`stopped` runs however the loop ends."""

    _layer_down: bool = False

    def link_name(self) -> str:
        """How the logs name this socket."""
        return ""

    def stopped(self) -> None:
        """The consumer loop ended (the server may cancel a consumer that is slow to close)."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.scope = scope
        self.channel_layer = get_channel_layer(self.channel_layer_alias)
        self.base_send = send
        sources = [receive]
        if self.channel_layer is not None:
            self.channel_name = await self.channel_layer.new_channel()
            self.channel_receive = self._channel_receive
            sources.append(self.channel_receive)
        try:
            with contextlib.suppress(StopConsumer):
                await await_many_dispatch(sources, self.dispatch)
        finally:
            self.stopped()

    async def dispatch(self, message: dict[str, Any]) -> None:
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def _channel_receive(self) -> dict[str, Any]:
        pause = 0.5
        while True:
            try:
                message: dict[str, Any] = await self.channel_layer.receive(self.channel_name)
            except (redis.RedisError, OSError) as exc:
                if not self._layer_down:
                    log.warning("link %s: channel layer unreachable (%s); retrying", self.link_name(), exc)
                    self._layer_down = True
                await asyncio.sleep(pause)
                pause = min(pause * 2, LAYER_RETRY_MAX_S)
                continue
            if self._layer_down:
                log.info("link %s: channel layer back", self.link_name())
                self._layer_down = False
            return message
