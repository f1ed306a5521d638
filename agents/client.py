"""The agent's link to the coordinator: WebSocket, Hello, 1 s heartbeats, reconnect, buffering.

Delivery: reports and acks go through an :class:`Outbox`. A message leaves the outbox only when it
is *confirmed*: after each heartbeat the client sends a WebSocket ping, and the pong proves that every
frame sent before the ping reached the coordinator's process (TCP keeps order). Unconfirmed messages
go back to the front of the queue when the link drops and are re-sent after the reconnect with the
same ``report_id`` / ``command_id``; the coordinator de-duplicates. While disconnected the outbox
buffers up to ``max_buffered`` messages (oldest dropped first, with a warning).

Authentication: ``Authorization: Bearer <token>`` header on the opening handshake.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus, WebSocketException

from controlplane.core.protocol import (
    AUTH_HEADER,
    HEARTBEAT_INTERVAL_S,
    AgentEnvelope,
    CoordinatorEnvelope,
    Heartbeat,
    Hello,
    ProtocolError,
    ProtocolViolation,
    bearer,
    decode_coordinator_frame,
    utcnow,
)

log = logging.getLogger("agents.client")


class Outbox:
    def __init__(self, max_buffered: int = 10_000) -> None:
        self.queue: deque[Any] = deque()
        self.unconfirmed: deque[tuple[int, Any]] = deque()
        self.max_buffered = max_buffered
        self.counter = 0
        self.dropped = 0
        self.wakeup = asyncio.Event()

    def put(self, message: Any) -> None:
        self.queue.append(message)
        while len(self.queue) + len(self.unconfirmed) > self.max_buffered and self.queue:
            self.queue.popleft()
            self.dropped += 1
            log.warning("outbox full: dropped the oldest message (%d dropped so far)", self.dropped)
        self.wakeup.set()

    def sent(self, message: Any) -> int:
        self.counter += 1
        self.unconfirmed.append((self.counter, message))
        return self.counter

    def confirm(self, upto: int) -> None:
        while self.unconfirmed and self.unconfirmed[0][0] <= upto:
            self.unconfirmed.popleft()

    def requeue_unconfirmed(self) -> None:
        """Link lost: everything not confirmed goes back to the front, in order."""
        self.queue.extendleft(m for _, m in reversed(self.unconfirmed))
        self.unconfirmed.clear()

    def __len__(self) -> int:
        return len(self.queue) + len(self.unconfirmed)


class CoordinatorClient:
    def __init__(
        self,
        url: str,
        token: str,
        node: str,
        session: str,
        hello: Callable[[], Hello],
        heartbeat: Callable[[], Heartbeat],
        on_message: Callable[[CoordinatorEnvelope], Awaitable[None]],
        outbox: Outbox,
        heartbeat_s: float = HEARTBEAT_INTERVAL_S,
        backoff_min_s: float = 0.2,
        backoff_max_s: float = 5.0,
    ) -> None:
        self.url, self.token, self.node, self.session = url, token, node, session
        self.hello, self.heartbeat, self.on_message = hello, heartbeat, on_message
        self.outbox = outbox
        self.heartbeat_s = heartbeat_s
        self.backoff_min_s, self.backoff_max_s = backoff_min_s, backoff_max_s
        self.seq = 0
        self.connected = asyncio.Event()
        self.connections = 0
        self._ws: ClientConnection | None = None
        self._stop = False
        self._beat_now = asyncio.Event()
        self.on_heartbeat: Callable[[float, float], None] | None = None
        """Set by the agent's metrics: (seconds the heartbeat left late, seconds until its pong)."""

    def beat_now(self) -> None:
        """Send the next heartbeat at once instead of at its tick (the agent's state changed in a way
        the coordinator waits for, e.g. warming ended); the 1 s rhythm goes on from there."""
        self._beat_now.set()

    def _envelope(self, message: Any) -> str:
        env = AgentEnvelope(
            node=self.node, session=self.session, seq=self.seq, sent_at=utcnow(), message=message
        )
        self.seq += 1
        return env.model_dump_json()

    async def send_now(self, message: Any) -> None:
        """Send outside the outbox (Hello, Heartbeat, ProtocolError); dropped if not connected."""
        if self._ws is not None:
            await self._ws.send(self._envelope(message))

    async def stop(self) -> None:
        self._stop = True
        if self._ws is not None:
            await self._ws.close()

    async def run(self) -> None:
        backoff = self.backoff_min_s
        while not self._stop:
            try:
                async with connect(
                    self.url,
                    additional_headers={AUTH_HEADER: bearer(self.token)},
                    open_timeout=5,
                    ping_interval=None,  # our heartbeat pings instead
                    close_timeout=1,
                    max_size=16 * 2**20,
                ) as ws:
                    self._ws = ws
                    self.connections += 1
                    backoff = self.backoff_min_s
                    await self._session(ws)
            except InvalidStatus as exc:
                log.error("coordinator refused the connection: HTTP %s", exc.response.status_code)
            except (OSError, WebSocketException, TimeoutError) as exc:
                log.info("link to coordinator down: %s", exc)
            finally:
                self._ws = None
                self.connected.clear()
                self.outbox.requeue_unconfirmed()
            if self._stop:
                break
            await asyncio.sleep(backoff * random.uniform(0.8, 1.2))
            backoff = min(backoff * 2, self.backoff_max_s)

    async def _session(self, ws: ClientConnection) -> None:
        await ws.send(self._envelope(self.hello()))
        self.connected.set()
        tasks = [
            asyncio.ensure_future(self._sender(ws)),
            asyncio.ensure_future(self._heartbeats(ws)),
            asyncio.ensure_future(self._receiver(ws)),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t

    async def _sender(self, ws: ClientConnection) -> None:
        while True:
            while self.outbox.queue:
                message = self.outbox.queue[0]
                await ws.send(self._envelope(message))
                self.outbox.queue.popleft()
                self.outbox.sent(message)
            self.outbox.wakeup.clear()
            await self.outbox.wakeup.wait()

    async def _heartbeats(self, ws: ClientConnection) -> None:
        next_t = time.monotonic()
        self._beat_now.clear()  # the hello just sent carries the state of now
        while True:
            sent = time.monotonic()
            await ws.send(self._envelope(self.heartbeat()))
            marker = self.outbox.counter
            pong = await ws.ping()
            try:
                await asyncio.wait_for(pong, timeout=max(self.heartbeat_s * 3, 0.1))
            except TimeoutError:
                log.warning("no pong from coordinator within %.1fs: reconnecting", self.heartbeat_s * 3)
                return
            self.outbox.confirm(marker)
            if self.on_heartbeat is not None:
                self.on_heartbeat(sent - next_t, time.monotonic() - sent)
            next_t += self.heartbeat_s
            delay = next_t - time.monotonic()
            if delay > 0 and not self._beat_now.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._beat_now.wait(), timeout=delay)
            if self._beat_now.is_set():
                self._beat_now.clear()
                next_t = time.monotonic()

    async def _receiver(self, ws: ClientConnection) -> None:
        async for raw in ws:
            try:
                env = decode_coordinator_frame(raw)
            except ProtocolViolation as exc:
                log.warning("refused frame from coordinator: %s", exc)
                await ws.send(self._envelope(exc.error))
                continue
            if isinstance(env.message, ProtocolError):
                log.error(
                    "coordinator reports a protocol error: %s: %s", env.message.code, env.message.detail
                )
                continue
            await self.on_message(env)
