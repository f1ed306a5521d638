"""The iteration stats of every agent link of one ASGI process, stored together.

The ranks of a running task report their iteration stats every second (ranks 0 and last) or ten
(the others): at 2,048 nodes with 64 tasks, over a hundred reports a second. Stored one at a time, each
was a transaction of eight to eleven statements on the process's one database thread, which filled it:
a failure report queued behind seconds of them. Here a link hands its stats (once the node's right to
speak for the rank is checked) to the process's pending batch and goes on with its next frame; one task
stores the batch every :data:`FLUSH_EVERY_S` in one transaction whose statements do not grow with its
size (:func:`controlplane.apps.metrics.ingest.record_iteration_stats_batch`).

A batch that waits for a row lock longer than
:data:`controlplane.apps.metrics.ingest.LOCK_WAIT_MS` gives way and is tried again at the next flush
(the orchestration loop's transactions are never the ones that wait). While PostgreSQL is unreachable a
batch is kept and retried (at most :data:`MAX_PENDING` reports, the
oldest dropped first, with a warning). A batch the database refuses for another reason is stored report
by report, and a report refused on its own is answered to its link with a ``protocol_error``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from channels.db import database_sync_to_async
from django.db import InterfaceError, OperationalError

from controlplane.apps.metrics.ingest import record_iteration_stats_batch
from controlplane.core.protocol import WorkerReport
from controlplane.live.loop_local import loop_local

log = logging.getLogger(__name__)

FLUSH_EVERY_S = 0.2
"""How long a report may wait for its batch: small beside a transition's resume step and the 1 s
reporting interval."""
MAX_PENDING = 50_000
"""Reports kept while the database is unreachable (about seven minutes of a 2,048-node fleet's)."""
RETRY_AFTER_S = 1.0
"""Pause before a batch the database could not take is tried again."""

GAVE_WAY = frozenset({"55P03", "40P01"})
"""SQLSTATEs of a batch that waited too long for a row lock or was chosen in a deadlock: tried again at
the next flush."""

Refused = Callable[[str], Awaitable[None]]
"""Answers the report's link that the report could not be stored (the reason)."""


class StatsBatch:
    """The pending iteration stats of one event loop's links and the task that stores them."""

    def __init__(self) -> None:
        self._pending: list[tuple[WorkerReport, Refused]] = []
        self._stored: asyncio.Future[None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self.dropped = 0

    def add(self, report: WorkerReport, refused: Refused) -> None:
        """Queue ``report`` for the next batch; ``refused`` is awaited if the database refuses it."""
        loop = asyncio.get_running_loop()
        self._pending.append((report, refused))
        if len(self._pending) > MAX_PENDING:
            excess = len(self._pending) - MAX_PENDING
            del self._pending[:excess]
            self.dropped += excess
            log.warning("iteration stats: %d reports dropped unstored so far", self.dropped)
        if self._stored is None:
            self._stored = loop.create_future()
        if self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._write())

    async def flushed(self) -> None:
        """Wait until the reports queued so far were stored (or tried, while the database is down)."""
        if self._stored is not None:
            await asyncio.shield(self._stored)

    async def _write(self) -> None:
        while self._pending:
            await asyncio.sleep(FLUSH_EVERY_S)
            batch, stored = self._pending, self._stored
            self._pending, self._stored = [], None
            try:
                await self._store(batch)
            finally:
                if stored is not None and not stored.done():
                    stored.set_result(None)

    def _keep(self, reports: list[tuple[WorkerReport, Refused]]) -> None:
        """``reports`` go back in front of the pending ones, for the next batch."""
        self._pending[:0] = reports
        if self._stored is None:
            self._stored = asyncio.get_running_loop().create_future()

    async def _store(self, batch: list[tuple[WorkerReport, Refused]]) -> None:
        store = database_sync_to_async(record_iteration_stats_batch)
        try:
            await store([report for report, _ in batch])
            return
        except (OperationalError, InterfaceError) as exc:  # kept and tried again
            self._keep(batch)
            if getattr(exc.__cause__, "sqlstate", None) in GAVE_WAY:
                log.info("%d iteration stats gave way to another writer; retried", len(batch))
                return
            log.warning("%d iteration stats not stored (%s); retried", len(batch), str(exc).strip()[:200])
            await asyncio.sleep(RETRY_AFTER_S)
            return
        except Exception:
            log.exception("a batch of %d iteration stats refused: stored one by one", len(batch))
        for report, refused in batch:
            try:
                await store([report])
            except (OperationalError, InterfaceError):  # not this report's fault: tried again
                self._keep([(report, refused)])
            except Exception as exc:
                log.warning("iteration stats %s refused by the database: %s", report.report_id, exc)
                why = f"worker_report: iteration stats cannot be stored: {str(exc).splitlines()[0][:500]}"
                with contextlib.suppress(Exception):  # its link may be gone
                    await refused(why)


stats_batch = loop_local(StatsBatch)
"""This event loop's batch."""
