"""The heartbeats of every agent link of one ASGI process, written to Redis together.

A heartbeat is one ``ZADD`` into the liveness set (:mod:`controlplane.apps.fleet.last_seen`). Written one
at a time, each took a hop to a worker thread (the Redis client is synchronous) and the event loop spent
its time handing them over: at 2,048 nodes, 2,048 hops a second kept one core busy in the thread pool's
locks and a hello was handled every 7 s. Here every link adds its heartbeat to the process's pending batch
and one task writes the batch every :data:`FLUSH_EVERY_S` in one pipelined round trip (a node's newest
time wins; the queueing delays go with the time each frame was read). A link that must know whether its
heartbeat reached Redis (to stamp PostgreSQL instead when it did not) awaits the batch's outcome.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time

import redis

from controlplane.apps.fleet import last_seen
from controlplane.live.loop_local import loop_local

log = logging.getLogger(__name__)

READER = f"{socket.gethostname()}:{os.getpid()}"
"""This process, as the reader of its links' heartbeats (its queueing delays are judged apart from other
processes': :data:`controlplane.apps.fleet.last_seen.READERS_KEY`)."""
FLUSH_EVERY_S = 0.05
"""How long a heartbeat may wait for its batch: small beside the 2 s suspect deadline."""


class HeartbeatBatch:
    """The pending heartbeats of one event loop's links and the task that writes them."""

    def __init__(self) -> None:
        self._times: dict[int, float] = {}
        self._delays: list[tuple[float, float]] = []
        self._written: asyncio.Future[bool] | None = None
        self._writer: asyncio.Task[None] | None = None

    def add(self, node_id: int, when: float, delay: float | None) -> asyncio.Future[bool]:
        """Queue ``node_id``'s heartbeat of ``when``; the future says whether Redis took its batch."""
        loop = asyncio.get_running_loop()
        if self._written is None:
            self._written = loop.create_future()
        self._times[node_id] = max(when, self._times.get(node_id, when))
        if delay is not None:
            self._delays.append((delay, time.time()))
        if self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._write())
        return self._written

    async def _write(self) -> None:
        while self._written is not None:
            await asyncio.sleep(FLUSH_EVERY_S)
            times, delays, written = self._times, self._delays, self._written
            self._times, self._delays, self._written = {}, [], None
            try:
                await asyncio.to_thread(last_seen.record_many, times, delays, READER)
                ok = True
            except redis.RedisError as exc:
                log.warning("%d heartbeats not recorded in Redis (%s)", len(times), exc)
                ok = False
            if not written.done():
                written.set_result(ok)


heartbeat_batch = loop_local(HeartbeatBatch)
"""This event loop's batch."""
