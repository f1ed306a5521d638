"""A link's database work, in the order its frames came, on one task beside the socket's reading.

Everything a link does with PostgreSQL runs here, one item after another, while the socket keeps
being read: a heartbeat is recorded in Redis the moment it arrives, whatever database work of the link
(a hello, a report, commands to send) still waits for the process's database thread. When that work
held the reading instead, a node that had just said hello at a cold start of a fleet fell silent to the
watchdog while its commands waited behind the other nodes' hellos.

An item that fails closes the link (its ``on_failure``); what is still queued is dropped, because the
agent re-sends every unacknowledged frame after it reconnects.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Work = Callable[[], Awaitable[None]]


class LinkBroken(Exception):
    """The link was closed because an item of its work failed: the rest of its queue is dropped."""


class SequencedWork:
    """One link's queue of database work and the task that runs it."""

    def __init__(self, name: str, on_failure: Callable[[], Awaitable[None]]) -> None:
        """``name``: how the logs call the link; ``on_failure``: closes it (awaited once per failure)."""
        self.name = name
        self._on_failure = on_failure
        self._queue: asyncio.Queue[Work | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = asyncio.ensure_future(self._run())

    def enqueue(self, work: Work) -> None:
        self._queue.put_nowait(lambda: self._guarded(work))

    async def finish(self) -> None:
        """Run what is queued, then stop (the frames received before the socket closed are handled)."""
        if self._task is None:
            return
        self._queue.put_nowait(None)
        await self._task
        self._task = None

    def cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def fail(self, exc: Exception) -> None:
        """Close the link for ``exc`` and drop the rest of the queue (raises :class:`LinkBroken`)."""
        await self._on_failure()
        raise LinkBroken from exc

    async def _guarded(self, work: Work) -> None:
        try:
            await work()
        except LinkBroken:
            raise
        except Exception as exc:
            log.exception("agent %s: link work failed", self.name)
            await self.fail(exc)

    async def _run(self) -> None:
        while True:
            work = await self._queue.get()
            if work is None:
                return
            try:
                await work()
            except LinkBroken:  # closed: what is queued is re-sent by the agent after it reconnects
                while not self._queue.empty():
                    if self._queue.get_nowait() is None:
                        return
