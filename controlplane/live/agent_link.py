"""The coordinator side of the agent link (docs/ARCHITECTURE.md §2, §6, §7.1): one WebSocket per node agent.

The consumer only authenticates, decodes, checks who speaks, and hands each message to one small
synchronous handler that persists it through the services (run with ``database_sync_to_async``):

- **connect**: ``Authorization: Bearer <node token>`` → the node (by token hash). A missing or unknown
  (rotated) token is logged, answered with a ``protocol_error`` of code ``unauthorized`` and closed
  with :data:`CLOSE_UNAUTHORIZED`. A newer socket of the same node closes older ones
  (:data:`CLOSE_SUPERSEDED`).
- every frame is decoded by the core codec; a refusal (malformed JSON, unknown type, wrong version,
  invalid fields) is answered with ``protocol_error`` and the link stays up. A frame whose envelope
  ``node`` is not the authenticated node is refused (``unauthorized``), logged and audited.
- ``hello`` (must come first): device inventory upserted, node → healthy (a lost node re-joins),
  commands that were sent but never acknowledged go back to pending, then every pending command is
  sent in order. A joining (or lost) node whose agent says ``warming`` (its warm spare workers are
  still starting: a rank placed there now would start cold) stays ``joining`` — the planner places
  nothing on it — until a heartbeat says ``warming: false``; a suspect node (same agent, link blip)
  becomes healthy at once either way.
- ``heartbeat``: one pipelined Redis write (:mod:`controlplane.apps.fleet.last_seen`: the node's time
  of sending, on the control plane's clock, and the link's queueing delay); PostgreSQL is not touched
  while the node is healthy (the link caches its node's state and is told of every change,
  ``node.state``), except one ``UPDATE … RETURNING state`` every :data:`STATE_REREAD_EVERY` heartbeats.
  A node that is not healthy costs that UPDATE and, when the heartbeat is fresh, its return to service
  (a joining node whose agent is still warming costs nothing more). A heartbeat that waited in a queue
  longer than ``UNICRON_SUSPECT_AFTER_S`` brings nothing back. With Redis unreachable the heartbeat is
  stamped in PostgreSQL instead. A node that lists workers gets one more transaction every
  :data:`WORKERS_RECONCILED_EVERY_S`: its workers against its allocations, and a stray seen twice in a
  row is told to stop (``fleet.liveness.reconcile_workers``).
- ``worker_report``: failure evidence → classified :class:`FailureEvent` (idempotent by
  ``report_id``) with the report's epoch; evidence of the task's *current* epoch enqueues
  ``incidents.handle_failure`` after the settle window, older epochs are recorded but never acted on
  (fencing). Iteration stats / TransitionReports of the current epoch advance the task's iteration and
  its transition's resume step; rank 0's stats → metric samples. A rank that exits 0 after its last
  iteration counts toward the task's completion.
- ``ack``: the outbox row is acknowledged (duplicates are harmless); a transition's command enqueues
  ``planning.advance_transition``.
- a node that comes back (hello / heartbeat after suspect or lost, once its agent is not warming)
  triggers a re-plan.
- **disconnect**: the node becomes suspect at once; the health watchdog
  (``fleet.check_node_health``) declares it lost if no heartbeat arrives within
  ``UNICRON_LOST_AFTER_S`` of the last one (``UNICRON_MASS_SILENCE_LOST_AFTER_S`` while most nodes are
  silent at once: see ``incidents/node_health.py``).

Unexpected errors while persisting (e.g. the database is down) close the socket with
:data:`CLOSE_INTERNAL` so the agent reconnects and re-sends what it buffered; nothing is acknowledged that
was not stored. A handshake while PostgreSQL or Redis is unreachable is accepted and closed at once with
:data:`CLOSE_STORE_UNAVAILABLE` (the agent retries with back-off), not answered with an HTTP 500. Close
codes are application codes (4000-4999): the WebSocket server refuses to send the protocol's own 1011.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, cast

import redis
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from channels.utils import await_many_dispatch
from django.conf import settings
from django.db import DataError

from controlplane.apps.fleet import last_seen
from controlplane.apps.fleet.authority import (
    Refusal,
    check_snapshot_adverts,
    check_worker_report,
    do_record_refusal,
    list_snapshot_keys,
)
from controlplane.apps.fleet.choices import NodeState
from controlplane.apps.fleet.delivery import fail_undeliverable, mark_sent, pending_commands, record_ack
from controlplane.apps.fleet.liveness import (
    StrayWorker,
    apply_hello,
    mark_link_closed,
    reconcile_workers,
    record_impersonation,
    revive_node,
)
from controlplane.apps.fleet.models import Node
from controlplane.apps.fleet.outbox import (
    AGENT_SUPERSEDED_EVENT,
    UndeliverableCommand,
    agent_group,
    command_message,
)
from controlplane.apps.fleet.selectors import get_node_for_token
from controlplane.apps.fleet.services import do_record_agent_heartbeat, do_record_snapshots
from controlplane.apps.incidents.reports import record_failure_report
from controlplane.apps.metrics.ingest import record_iteration_stats
from controlplane.apps.planning.progress import record_expected_exit, record_transition_report
from controlplane.apps.planning.transitions import on_command_settled
from controlplane.apps.training.checkpoints import record_checkpoint_saved
from controlplane.core.protocol import (
    COORDINATOR_NODE,
    Ack,
    AgentEnvelope,
    CoordinatorEnvelope,
    Heartbeat,
    Hello,
    ProtocolError,
    ProtocolViolation,
    SnapshotGrant,
    WorkerReport,
    decode_agent_frame,
    encode,
)
from controlplane.live.heartbeat_batch import heartbeat_batch

log = logging.getLogger(__name__)

CLOSE_UNAUTHORIZED = 4401
"""Close code: missing, malformed or unknown node token (the agent should not retry blindly)."""
CLOSE_SUPERSEDED = 4409
"""Close code: a newer connection authenticated as the same node."""
CLOSE_INTERNAL = 4500
"""Close code: the coordinator could not persist a message; reconnect and re-send."""
CLOSE_STORE_UNAVAILABLE = 4503
"""Close code: PostgreSQL or Redis is unreachable right now; reconnect after a back-off."""

STATE_REREAD_EVERY = 30
"""A healthy node's link re-reads its state from PostgreSQL every this many heartbeats (the ``node.state``
events tell it of changes; this bounds how long a lost event can mislead it)."""

WORKERS_RECONCILED_EVERY_S = 15.0
"""A healthy node's listed workers are compared with its allocations this often (only while it lists
any): a stray seen in two readings in a row is stopped (``fleet.liveness.reconcile_workers``)."""


class _LinkBroken(Exception):
    """The link was closed because a message could not be handled: the rest of its queue is dropped."""


_BEARER = re.compile(r"^Bearer\s+(\S+)\s*$", re.IGNORECASE)


def _bearer_token(scope: dict[str, Any]) -> str | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            match = _BEARER.match(value.decode("latin-1"))
            return match.group(1) if match else None
    return None


def report_handler(report: WorkerReport) -> Callable[[int, WorkerReport], str]:
    """The service that persists ``report`` (each one short transaction; returns what happened)."""
    event = report.event
    if event.kind == "iteration_stats":
        return record_iteration_stats
    if event.kind == "transition":
        return record_transition_report
    if event.kind == "checkpoint_saved":
        return record_checkpoint_saved
    if event.kind == "exited" and event.expected:
        return record_expected_exit
    if event.kind == "started":
        return lambda node_id, report: "started: no failure"
    return record_failure_report


# --------------------------------------------------------------------------------------------------
# The consumer
# --------------------------------------------------------------------------------------------------

_db = database_sync_to_async


class AgentLinkConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]
    """One node agent's link. Per-message work is one short transaction (a single UPDATE for
    heartbeats)."""

    node_id: int | None = None
    node_name: str = ""
    session: str | None = None
    _seq: int = 0
    _superseded: bool = False
    _impersonations: set[str]
    _snapshots: list[dict[str, Any]] | None = None
    _last_seq: int | None = None
    _granted: set[tuple[str, str]]
    _clock: last_seen.SenderClock
    _state: str | None = None
    """The node's state as this link last read or was told it (``node.state`` events)."""
    _beats: int = 0
    _reconcile_at: float = 0.0
    _strays: frozenset[StrayWorker] = frozenset()
    """The workers the last reconciliation found stray (stopped if the next one finds them again)."""
    _newest_beat: AgentEnvelope | None = None
    """The newest heartbeat received (its database part is done for the newest one only)."""
    _beat_queued: bool = False
    _work: asyncio.Queue[Callable[[], Awaitable[None]] | None]
    _worker: asyncio.Task[None] | None = None
    _send_lock: asyncio.Lock
    _pending_sends_queued: bool = False
    _beat: tuple[float, float, asyncio.Future[bool] | None] = (0.0, 0.0, None)
    """The newest heartbeat's time, its queueing delay, and whether Redis took it (once its batch is
    written: :mod:`controlplane.live.heartbeat_batch`)."""

    _layer_down: bool = False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Channels' consumer loop, with the channel layer read through :meth:`_channel_receive`: a Redis
        outage must not kill the link (its heartbeats then go to PostgreSQL, and the commands it would
        have been woken for stay pending in the outbox until Redis is back or the agent reconnects)."""
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
        finally:  # the server may cancel a consumer that is slow to close: its work goes with it
            if self._worker is not None and not self._worker.done():
                self._worker.cancel()

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels' dispatch without its hop to the database thread before every message
        (``aclose_old_connections``): that hop put each heartbeat behind every database call queued in
        the process, so a busy link (a fleet's cold start) silenced healthy nodes. Every database call of
        this consumer is a ``database_sync_to_async`` call, which closes stale connections itself."""
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
                    log.warning(
                        "agent link %s: channel layer unreachable (%s); retrying", self.node_name, exc
                    )
                    self._layer_down = True
                await asyncio.sleep(pause)
                pause = min(pause * 2, 10.0)
                continue
            if self._layer_down:
                log.info("agent link %s: channel layer back", self.node_name)
                self._layer_down = False
            return message

    @property
    def _node_id(self) -> int:
        if self.node_id is None:
            raise RuntimeError("agent link used before authentication")
        return self.node_id

    async def connect(self) -> None:
        """Accepted at once, authenticated after: the WebSocket server drops a handshake not accepted
        within seconds, and the token's lookup waits for the process's database thread, which a cold
        start of a fleet keeps busy (links were dropped and re-opened by the thousand). Frames that
        arrive meanwhile wait for this method to return, unread."""
        self._impersonations = set()
        self._granted = set()
        self._clock = last_seen.SenderClock()
        self._send_lock = asyncio.Lock()
        await self.accept()
        token = _bearer_token(self.scope)
        try:
            node = await _db(get_node_for_token)(token) if token else None
        except Exception as exc:  # PostgreSQL down: no 500 for the handshake, a close the agent retries
            await self._refuse_for_outage("PostgreSQL", exc)
            return
        if node is None:
            client = self.scope.get("client")
            why = "missing or malformed Authorization header" if token is None else "unknown node token"
            log.warning("agent link refused from %s: %s", client, why)
            await self._send_error(ProtocolError(code="unauthorized", detail=f"{why}; closing"))
            await self.close(code=CLOSE_UNAUTHORIZED)
            return
        group = agent_group(node.name)
        try:
            await self.channel_layer.group_add(group, self.channel_name)
            await self.channel_layer.group_send(
                group, {"type": AGENT_SUPERSEDED_EVENT, "by": self.channel_name}
            )
        except Exception as exc:  # Redis down: commands could not wake this link
            await self._refuse_for_outage("Redis", exc)
            return
        self.node_id, self.node_name = node.pk, node.name
        self._work = asyncio.Queue()
        self._worker = asyncio.ensure_future(self._run_work())
        log.info("agent link of %s open", node.name)

    async def _refuse_for_outage(self, store: str, exc: Exception) -> None:
        log.warning(
            "agent link from %s refused: %s unavailable (%s)",
            self.scope.get("client"),
            store,
            str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__,
        )
        await self.close(code=CLOSE_STORE_UNAVAILABLE)

    async def disconnect(self, code: int) -> None:
        if self.node_id is None:
            return
        await self._finish_work()
        try:
            await self.channel_layer.group_discard(agent_group(self.node_name), self.channel_name)
        except Exception as exc:  # Redis down: the group entry expires on its own
            log.warning("agent link of %s: group not left (%s)", self.node_name, exc)
        if self._superseded:
            return
        try:
            state = await _db(mark_link_closed)(self.node_id, code)
        except Exception:
            log.exception("agent link of %s: could not mark the node suspect", self.node_name)
            return
        log.warning("agent link of %s closed (code %s): node %s", self.node_name, code, state)

    # --- frames from the agent --------------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """Checks the frame and queues its handling (answers included, so they leave in the order the
        frames came); only a heartbeat's time is recorded at once (:meth:`_note_heartbeat`)."""
        if self.node_id is None:
            return
        raw = text_data if text_data is not None else (bytes_data or b"")
        try:
            envelope = decode_agent_frame(raw)
        except ProtocolViolation as refusal:
            log.info("agent %s: refused frame: %s", self.node_name, refusal)
            self._answer(refusal.error)
            return
        if envelope.node != self.node_name:
            self._enqueue(lambda: self._refuse_impersonation(envelope))
            return
        mtype = envelope.message.type
        new_session = mtype == "hello" and envelope.session != self.session
        if self._last_seq is not None and envelope.seq <= self._last_seq and not new_session:
            self._answer(
                ProtocolError(
                    code="out_of_order",
                    detail=f"seq {envelope.seq} is not above the previous frame's {self._last_seq}",
                    in_reply_to_seq=envelope.seq,
                )
            )
            return
        self._last_seq = envelope.seq
        if self.session is None and mtype != "hello":
            self._answer(
                ProtocolError(
                    code="invalid",
                    detail=f"the first frame must be hello, got {mtype}",
                    in_reply_to_seq=envelope.seq,
                )
            )
            return
        if mtype == "hello":
            hello = cast(Hello, envelope.message)
            if len({d.index for d in hello.devices}) != len(hello.devices):
                self._answer(
                    ProtocolError(
                        code="invalid",
                        detail="hello: device indexes must be unique",
                        in_reply_to_seq=envelope.seq,
                    )
                )
                return
            self.session = envelope.session  # the frames behind it belong to this session
        elif mtype == "heartbeat":
            self._note_heartbeat(envelope)
            if self._beat_queued:
                return  # the queued one does the database part with the newest heartbeat
            self._beat_queued = True
        handler = self._handlers()[mtype]
        self._enqueue(lambda: self._handle(handler, envelope))

    # --- the link's sequenced work ------------------------------------------------------------------
    #
    # Everything that touches PostgreSQL runs in arrival order on one task per link, beside the socket's
    # reading: a heartbeat is recorded in Redis the moment it arrives, whatever database work of this
    # link (a hello, a report, commands to send) is still waiting for the process's database thread.
    # Before, that work held the link's reading, so at a cold start of a fleet a node that had just said
    # hello fell silent to the watchdog while its commands waited behind the other nodes' hellos.

    def _enqueue(self, work: Callable[[], Awaitable[None]]) -> None:
        self._work.put_nowait(lambda: self._guarded(work))

    def _answer(self, error: ProtocolError) -> None:
        self._enqueue(lambda: self._send_error(error))

    async def _guarded(self, work: Callable[[], Awaitable[None]]) -> None:
        try:
            await work()
        except _LinkBroken:
            raise
        except Exception as exc:
            log.exception("agent %s: link work failed", self.node_name)
            await self.close(code=CLOSE_INTERNAL)
            raise _LinkBroken from exc

    async def _run_work(self) -> None:
        while True:
            work = await self._work.get()
            if work is None:
                return
            try:
                await work()
            except _LinkBroken:  # closed: what is queued is re-sent by the agent after it reconnects
                while not self._work.empty():
                    if self._work.get_nowait() is None:
                        return

    async def _finish_work(self) -> None:
        """The frames received before the socket closed are handled before the node is marked."""
        if self._worker is None:
            return
        self._work.put_nowait(None)
        await self._worker
        self._worker = None

    async def _handle(
        self, handler: Callable[[AgentEnvelope], Awaitable[None]], envelope: AgentEnvelope
    ) -> None:
        mtype = envelope.message.type
        try:
            await handler(envelope)
        except DataError as exc:  # a value the database cannot hold: the frame's fault, not ours
            log.warning(
                "agent %s: %s (seq %s) refused by the database: %s", self.node_name, mtype, envelope.seq, exc
            )
            detail = f"{mtype}: a value cannot be stored: {str(exc).splitlines()[0][:500]}"
            await self._send_error(ProtocolError(code="invalid", detail=detail, in_reply_to_seq=envelope.seq))
        except Exception as exc:
            log.exception("agent %s: %s (seq %s) could not be stored", self.node_name, mtype, envelope.seq)
            await self.close(code=CLOSE_INTERNAL)
            raise _LinkBroken from exc

    def _handlers(self) -> dict[str, Callable[[AgentEnvelope], Awaitable[None]]]:
        return {
            "hello": self._on_hello,
            "heartbeat": self._on_heartbeat,
            "worker_report": self._on_worker_report,
            "ack": self._on_ack,
            "protocol_error": self._on_protocol_error,
        }

    async def _on_hello(self, envelope: AgentEnvelope) -> None:
        hello = cast(Hello, envelope.message)
        self._snapshots = [s.model_dump(mode="json") for s in hello.snapshots]
        when, _delay = self._clock.place(envelope.sent_at.timestamp(), time.time())
        self._record_last_seen(when)  # first: the watchdog must not judge it by an older one
        state, refused = await _db(apply_hello)(self._node_id, hello)
        self._state = state
        # A hello that waited behind others (a cold start of the fleet) makes a node watched whose newest
        # recorded sign of life is that old hello, while fresher heartbeats wait behind it on this link:
        # the node is judged from the moment it joined, as the watchdog judges a node it has no entry for.
        self._record_last_seen(time.time())
        await self._refuse(envelope, "agent_snapshot_refused", refused)
        log.info(
            "agent %s hello: %d devices, session %s, node %s",
            self.node_name,
            len(hello.devices),
            envelope.session,
            state,
        )
        await self._send_pending()
        # its heartbeats waited behind all of this; the hello is handled once Redis has the node's time
        await asyncio.shield(self._record_last_seen(time.time()))

    def _note_heartbeat(self, envelope: AgentEnvelope) -> None:
        """The heartbeat's time into Redis as it arrives (its database part is sequenced)."""
        when, delay = self._clock.place(envelope.sent_at.timestamp(), time.time())
        self._beat = (when, delay, heartbeat_batch().add(self._node_id, when, delay))
        self._newest_beat = envelope
        self._beats += 1

    async def _on_heartbeat(self, envelope: AgentEnvelope) -> None:
        """The database part of the newest heartbeat received (one is queued at a time: while the link's
        database work waits, its heartbeats do not pile up behind it)."""
        self._beat_queued = False
        envelope = self._newest_beat or envelope
        heartbeat = cast(Heartbeat, envelope.message)
        when, delay, written = self._beat
        stored = written is not None and await asyncio.shield(written)  # shared with other links: shielded
        if not stored:
            log.warning("agent %s: heartbeat not recorded in Redis: stamped in PostgreSQL", self.node_name)
        snapshots = [s.model_dump(mode="json") for s in heartbeat.snapshots]
        if snapshots != self._snapshots:  # written only when the list changes: the 1 Hz path stays cheap
            self._snapshots = snapshots
            allowed, refused = await _db(check_snapshot_adverts)(self._node_id, heartbeat.snapshots)
            await _db(do_record_snapshots)(self._node_id, [s.model_dump(mode="json") for s in allowed])
            await self._refuse(envelope, "agent_snapshot_refused", refused)
        await self._reconcile_workers(heartbeat, delay)
        if stored and self._state == NodeState.HEALTHY and self._beats % STATE_REREAD_EVERY:
            return  # the hot path: Redis only
        if delay > float(settings.UNICRON_SUSPECT_AFTER_S):
            return  # it waited in a queue: it says nothing about the node now
        state = await _db(do_record_agent_heartbeat)(self._node_id, datetime.fromtimestamp(when, tz=UTC))
        self._state = state
        if state is None:  # the node was deleted under us
            await self.close(code=CLOSE_UNAUTHORIZED)
        elif state in (NodeState.SUSPECT, NodeState.LOST) or (
            state == NodeState.JOINING and not heartbeat.warming  # joining and warming: nothing to do
        ):
            new = await _db(revive_node)(self._node_id, heartbeat.warming, heartbeat.workers)
            self._state = new
            log.info("agent %s: heartbeat while %s -> %s", self.node_name, state, new)

    async def _reconcile_workers(self, heartbeat: Heartbeat, delay: float) -> None:
        """Every :data:`WORKERS_RECONCILED_EVERY_S`, a healthy node's fresh worker list against its
        allocations (nothing to compare, and no database call, while it lists none)."""
        if not heartbeat.workers:
            self._strays = frozenset()
            return
        now = time.monotonic()
        if (
            self._state != NodeState.HEALTHY
            or now < self._reconcile_at
            or delay > float(settings.UNICRON_SUSPECT_AFTER_S)  # an old list: says nothing about now
        ):
            return
        self._reconcile_at = now + WORKERS_RECONCILED_EVERY_S
        self._strays = await _db(reconcile_workers)(self._node_id, heartbeat.workers, self._strays)

    def _record_last_seen(self, when: float) -> asyncio.Future[bool]:
        """The node's newest sign of life into Redis, with the next batch; the future says whether Redis
        took it (a heartbeat's own record tells the link so: :meth:`_on_heartbeat`)."""
        return heartbeat_batch().add(self._node_id, when, None)

    async def _on_worker_report(self, envelope: AgentEnvelope) -> None:
        report = cast(WorkerReport, envelope.message)
        try:
            uuid.UUID(report.report_id)
        except ValueError:
            await self._send_error(
                ProtocolError(
                    code="invalid",
                    detail=f"worker_report: report_id {report.report_id!r} is not a UUID",
                    in_reply_to_seq=envelope.seq,
                )
            )
            return
        refusal = await _db(check_worker_report)(self._node_id, report)
        if refusal is not None:
            await self._refuse(envelope, "agent_report_refused", [refusal])
            return
        outcome = await _db(report_handler(report))(self._node_id, report)
        log.info("agent %s report %s: %s", self.node_name, report.report_id, outcome)

    async def _on_ack(self, envelope: AgentEnvelope) -> None:
        ack = cast(Ack, envelope.message)
        refusal, settled = await _db(record_ack)(self._node_id, ack)
        if settled is not None:
            await _db(on_command_settled)(settled)
        if refusal is not None:
            await self._send_error(
                ProtocolError(code="invalid", detail=refusal, in_reply_to_seq=envelope.seq)
            )

    async def _on_protocol_error(self, envelope: AgentEnvelope) -> None:
        log.warning("agent %s refused one of our frames: %s", self.node_name, envelope.message)

    async def _refuse(self, envelope: AgentEnvelope, verb: str, refusals: list[Refusal]) -> None:
        """Content the node may not speak for (``fleet.authority``): audited, answered, not stored."""
        if not refusals:
            return
        await _db(do_record_refusal)(self._node_id, verb, refusals)
        detail = "; ".join(r.detail for r in refusals)
        await self._send_error(
            ProtocolError(code="forbidden", detail=detail[:4000], in_reply_to_seq=envelope.seq)
        )

    async def _refuse_impersonation(self, envelope: AgentEnvelope) -> None:
        log.warning(
            "agent link of %s sent a frame as node %r (seq %s): refused",
            self.node_name,
            envelope.node,
            envelope.seq,
        )
        if envelope.node not in self._impersonations:  # one audit row per claimed node and socket
            self._impersonations.add(envelope.node)
            await _db(record_impersonation)(self._node_id, envelope.node, envelope.seq)
        await self._send_error(
            ProtocolError(
                code="unauthorized",
                detail=f"this link is authenticated as {self.node_name!r}; "
                f"it cannot speak for {envelope.node!r}",
                in_reply_to_seq=envelope.seq,
            )
        )

    # --- channel-layer events -----------------------------------------------------------------------

    async def agent_command(self, message: dict[str, Any]) -> None:
        """A command was committed to this node's outbox."""
        if self.session is None or self._pending_sends_queued:
            return  # before hello, hello itself sends everything pending; or a send is queued already
        self._pending_sends_queued = True

        async def send() -> None:
            self._pending_sends_queued = False
            await self._send_pending()

        self._enqueue(send)

    async def node_state(self, message: dict[str, Any]) -> None:
        """The node's state changed (``fleet.outbox.NODE_STATE_EVENT``)."""
        self._state = str(message.get("state") or "") or None

    async def agent_superseded(self, message: dict[str, Any]) -> None:
        if message.get("by") != self.channel_name:
            log.info("agent link of %s superseded by a newer connection", self.node_name)
            self._superseded = True
            await self.close(code=CLOSE_SUPERSEDED)

    # --- frames to the agent -----------------------------------------------------------------------

    async def _send_grants(self) -> None:
        """Snapshot keys of tasks whose replicas this node keeps without running them (once per socket)."""
        node = await _db(Node.objects.filter(pk=self._node_id).first)()
        if node is None:
            return
        for task_id, secret in (await _db(list_snapshot_keys)(node)).items():
            if (task_id, secret) not in self._granted:
                self._granted.add((task_id, secret))
                await self._send_envelope(SnapshotGrant(task_id=task_id, secret=secret))

    async def _send_pending(self) -> None:
        await self._send_grants()
        for row in await _db(pending_commands)(self._node_id):
            try:
                message = command_message(row)
            except UndeliverableCommand as exc:
                log.error("agent %s: command %s undeliverable: %s", self.node_name, row.command_id, exc)
                await _db(fail_undeliverable)(row, str(exc))
                continue
            await self._send_envelope(message)
            await _db(mark_sent)(row)

    async def _send_error(self, error: ProtocolError) -> None:
        await self._send_envelope(error)

    async def _send_envelope(self, message: Any) -> None:
        async with self._send_lock:  # the reading side and the sequenced work both answer: one order
            self._seq += 1
            envelope = CoordinatorEnvelope(
                node=COORDINATOR_NODE, session=self.session or "-", seq=self._seq, message=message
            )
            await self.send(text_data=encode(envelope))
