"""A node's signs of life as its agent link receives them: times into Redis as frames arrive, the
node's state as the link last knew it, and the database part of a heartbeat, done for the newest one.

A heartbeat costs one pipelined Redis write (:mod:`controlplane.live.heartbeat_batch`; the node's time of
sending on the control plane's clock, :class:`~controlplane.apps.fleet.last_seen.SenderClock`, and the
link's queueing delay) and nothing in PostgreSQL while the node is healthy, except one
``UPDATE … RETURNING state`` every :data:`STATE_REREAD_EVERY` heartbeats. A node that is not healthy
costs that UPDATE and, when the heartbeat is fresh, its return to service. With Redis unreachable the
heartbeat is stamped in PostgreSQL instead. A node that lists workers costs one more transaction every
:data:`WORKERS_RECONCILED_EVERY_S` (``fleet.liveness.reconcile_workers``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime

from channels.db import database_sync_to_async
from django.conf import settings

from controlplane.apps.fleet import last_seen
from controlplane.apps.fleet.choices import NodeState
from controlplane.apps.fleet.liveness import StrayWorker, reconcile_workers, revive_node
from controlplane.apps.fleet.services import do_record_agent_heartbeat
from controlplane.core.protocol import AgentEnvelope, Heartbeat
from controlplane.live.heartbeat_batch import heartbeat_batch

log = logging.getLogger(__name__)

_db = database_sync_to_async

STATE_REREAD_EVERY = 30
"""A healthy node's link re-reads its state from PostgreSQL every this many heartbeats (the ``node.state``
events tell it of changes; this bounds how long a lost event can mislead it)."""

WORKERS_RECONCILED_EVERY_S = 15.0
"""A healthy node's listed workers are compared with its allocations this often (only while it lists
any): a stray seen in two readings in a row is stopped (``fleet.liveness.reconcile_workers``)."""


class LinkLiveness:
    """One link's view of its node's liveness."""

    def __init__(self, node_id: int, node_name: str) -> None:
        self.node_id, self.node_name = node_id, node_name
        self.state: str | None = None
        """The node's state as this link last read or was told it (``node.state`` events)."""
        self._clock = last_seen.SenderClock()
        self._beats = 0
        self._newest: AgentEnvelope | None = None
        """The newest heartbeat received (its database part is done for the newest one only)."""
        self._queued = False
        self._beat: tuple[float, float, asyncio.Future[bool] | None] = (0.0, 0.0, None)
        """The newest heartbeat's time, its queueing delay, and whether Redis took it (once its batch is
        written)."""
        self._reconcile_at = 0.0
        self._strays: frozenset[StrayWorker] = frozenset()
        """The workers the last reconciliation found stray (stopped if the next one finds them again)."""

    def record_last_seen(self, when: float) -> asyncio.Future[bool]:
        """The node's newest sign of life into Redis, with the next batch; the future says whether Redis
        took it."""
        return heartbeat_batch().add(self.node_id, when, None)

    def hello_arrived(self, envelope: AgentEnvelope) -> None:
        """First, before the hello's database work: the watchdog must not judge the node by an older time."""
        when, _delay = self._clock.place(envelope.sent_at.timestamp(), time.time())
        self.record_last_seen(when)

    def note_heartbeat(self, envelope: AgentEnvelope) -> bool:
        """The heartbeat's time into Redis as it arrives. True: its database part must be queued (False:
        one is queued already and will take this newest heartbeat)."""
        when, delay = self._clock.place(envelope.sent_at.timestamp(), time.time())
        self._beat = (when, delay, heartbeat_batch().add(self.node_id, when, delay))
        self._newest = envelope
        self._beats += 1
        if self._queued:
            return False
        self._queued = True
        return True

    def take_newest(self, envelope: AgentEnvelope) -> AgentEnvelope:
        """The heartbeat whose database part runs now (the newest received)."""
        self._queued = False
        return self._newest or envelope

    async def stored(self) -> bool:
        """Whether Redis took the newest heartbeat (shared with other links' writes: shielded)."""
        written = self._beat[2]
        stored = written is not None and await asyncio.shield(written)
        if not stored:
            log.warning("agent %s: heartbeat not recorded in Redis: stamped in PostgreSQL", self.node_name)
        return stored

    async def after_heartbeat(self, heartbeat: Heartbeat, stored: bool) -> bool:
        """The database part of the newest heartbeat; False when the node no longer exists."""
        when, delay = self._beat[0], self._beat[1]
        await self._reconcile_workers(heartbeat, delay)
        if stored and self.state == NodeState.HEALTHY and self._beats % STATE_REREAD_EVERY:
            return True  # the hot path: Redis only
        if delay > float(settings.UNICRON_SUSPECT_AFTER_S):
            return True  # it waited in a queue: it says nothing about the node now
        state = await _db(do_record_agent_heartbeat)(self.node_id, datetime.fromtimestamp(when, tz=UTC))
        self.state = state
        if state is None:  # the node was deleted under us
            return False
        if state in (NodeState.SUSPECT, NodeState.LOST) or (
            state == NodeState.JOINING and not heartbeat.warming  # joining and warming: nothing to do
        ):
            new = await _db(revive_node)(self.node_id, heartbeat.warming, heartbeat.workers)
            self.state = new
            log.info("agent %s: heartbeat while %s -> %s", self.node_name, state, new)
        return True

    async def _reconcile_workers(self, heartbeat: Heartbeat, delay: float) -> None:
        """Every :data:`WORKERS_RECONCILED_EVERY_S`, a healthy node's fresh worker list against its
        allocations (nothing to compare, and no database call, while it lists none)."""
        if not heartbeat.workers:
            self._strays = frozenset()
            return
        now = time.monotonic()
        if (
            self.state != NodeState.HEALTHY
            or now < self._reconcile_at
            or delay > float(settings.UNICRON_SUSPECT_AFTER_S)  # an old list: says nothing about now
        ):
            return
        self._reconcile_at = now + WORKERS_RECONCILED_EVERY_S
        self._strays = await _db(reconcile_workers)(self.node_id, heartbeat.workers, self._strays)
