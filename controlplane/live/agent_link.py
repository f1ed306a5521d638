"""The coordinator side of the agent link (docs/ARCHITECTURE.md §2, §6, §7.1): one WebSocket per node agent.

The consumer only authenticates, decodes, checks who speaks and where the frame stands in its session
(:mod:`controlplane.live.frame_checks`), and hands each message to one small synchronous handler that
persists it through the services (``database_sync_to_async``, in the order the frames came:
:mod:`controlplane.live.sequenced_work`). Its channel layer may go away and come back
(:mod:`controlplane.live.resilient_consumer`).

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
- ``heartbeat``: its time into Redis as it arrives; PostgreSQL only when the node's state calls for it
  (:mod:`controlplane.live.link_liveness`, which also holds a node's listed workers against its
  allocations every few seconds).
- ``worker_report``: failure evidence → classified :class:`FailureEvent` (idempotent by
  ``report_id``) with the report's epoch; evidence of the task's *current* epoch enqueues
  ``incidents.handle_failure`` after the settle window, older epochs are recorded but never acted on
  (fencing). Iteration stats / TransitionReports of the current epoch advance the task's iteration and
  its transition's resume step; rank 0's stats → metric samples. Iteration stats are stored with the
  other links' of the process, a batch every 0.2 s (:mod:`controlplane.live.stats_batch`); the link
  goes on with its next frame meanwhile (an exit waits for them: a task completes with its last
  iterations counted). The node's right to speak for a rank is checked once per rank
  and epoch. A rank that exits 0 after its last
  iteration counts toward the task's completion.
- commands: a command committed to the node's outbox wakes its link through the channel layer, and the
  link reads and sends what is pending at once, on a task of its own and on the failure lane
  (:mod:`controlplane.live.failure_lane`), not behind the link's queued frames.
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
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, cast

from channels.db import database_sync_to_async
from django.db import DataError

from controlplane.apps.fleet.authority import (
    Refusal,
    check_snapshot_adverts,
    check_worker_report,
    do_record_refusal,
)
from controlplane.apps.fleet.delivery import Outbox, read_outbox, record_ack, settle_sends
from controlplane.apps.fleet.liveness import (
    apply_hello,
    mark_link_closed,
    record_impersonation,
)
from controlplane.apps.fleet.models import AgentCommand
from controlplane.apps.fleet.outbox import (
    AGENT_SUPERSEDED_EVENT,
    UndeliverableCommand,
    agent_group,
    command_message,
)
from controlplane.apps.fleet.selectors import get_node_for_token
from controlplane.apps.fleet.services import do_record_snapshots
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
from controlplane.live.failure_lane import on_failure_lane
from controlplane.live.frame_checks import bearer_token, check_frame_order
from controlplane.live.link_liveness import LinkLiveness
from controlplane.live.resilient_consumer import ResilientConsumer
from controlplane.live.sequenced_work import SequencedWork
from controlplane.live.stats_batch import stats_batch

log = logging.getLogger(__name__)

CLOSE_UNAUTHORIZED = 4401
"""Close code: missing, malformed or unknown node token (the agent should not retry blindly)."""
CLOSE_SUPERSEDED = 4409
"""Close code: a newer connection authenticated as the same node."""
CLOSE_INTERNAL = 4500
"""Close code: the coordinator could not persist a message; reconnect and re-send."""
CLOSE_STORE_UNAVAILABLE = 4503
"""Close code: PostgreSQL or Redis is unreachable right now; reconnect after a back-off."""


HELD_REMEMBERED = 4096
"""A link remembers at most this many ranks it was found to hold (then forgets them all)."""


def _hello(node_id: int, hello: Hello) -> tuple[str, list[Refusal], Outbox]:
    """A hello's database work in one call (a cold start of a fleet queues thousands on the process's
    database thread): the node's return (``fleet.liveness.apply_hello``), then what it has to be sent."""
    state, refused = apply_hello(node_id, hello)
    return state, refused, read_outbox(node_id)


def report_handler(report: WorkerReport) -> Callable[[int, WorkerReport], str]:
    """The service that persists ``report`` (each one short transaction; returns what happened)."""
    event = report.event
    if event.kind == "iteration_stats":  # the link batches them: controlplane.live.stats_batch
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


class AgentLinkConsumer(ResilientConsumer):
    """One node agent's link. Per-message work is one short transaction (a single UPDATE for
    heartbeats), in the order the frames came (:mod:`controlplane.live.sequenced_work`)."""

    node_id: int | None = None
    node_name: str = ""
    session: str | None = None
    _seq: int = 0
    _superseded: bool = False
    _impersonations: set[str]
    _snapshots: list[dict[str, Any]] | None = None
    _last_seq: int | None = None
    _granted: set[tuple[str, str]]
    _held: set[tuple[str, int, int]]
    """(task, epoch, rank) this node was found to have held: its reports need no further check."""
    _liveness: LinkLiveness
    _work: SequencedWork | None = None
    _send_lock: asyncio.Lock
    _outbox_lock: asyncio.Lock
    """One outbox read-and-send at a time (a wake-up's, the hello's)."""
    _greeted: bool = False
    """The hello was handled (it sent what was pending): wake-ups send from then on."""
    _sends_due: bool = False
    _sender: asyncio.Task[None] | None = None

    def link_name(self) -> str:
        return self.node_name

    def stopped(self) -> None:
        if self._work is not None:  # the server may cancel a consumer slow to close: its work goes too
            self._work.cancel()
        if self._sender is not None and not self._sender.done():
            self._sender.cancel()

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
        self._held = set()
        self._send_lock = asyncio.Lock()
        self._outbox_lock = asyncio.Lock()
        await self.accept()
        token = bearer_token(self.scope)
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
        self._liveness = LinkLiveness(node.pk, node.name)
        self._work = SequencedWork(node.name, lambda: self.close(code=CLOSE_INTERNAL))
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
        if self._work is not None:  # the frames received before the socket closed go first
            await self._work.finish()
        if self._sender is not None and not self._sender.done():  # unsent rows stay pending: re-sent
            self._sender.cancel()
        await stats_batch().flushed()
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
        misplaced = check_frame_order(envelope, self.session, self._last_seq)
        if misplaced is None or misplaced.code != "out_of_order":
            self._last_seq = envelope.seq
        if misplaced is not None:
            self._answer(misplaced)
            return
        if mtype == "hello":
            self.session = envelope.session  # the frames behind it belong to this session
        elif mtype == "heartbeat" and not self._liveness.note_heartbeat(envelope):
            return  # the queued one does the database part with the newest heartbeat
        handler = self._handlers()[mtype]
        self._enqueue(lambda: self._handle(handler, envelope))

    def _enqueue(self, work: Callable[[], Awaitable[None]]) -> None:
        if self._work is not None:
            self._work.enqueue(work)

    def _answer(self, error: ProtocolError) -> None:
        self._enqueue(lambda: self._send_error(error))

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
            assert self._work is not None
            await self._work.fail(exc)

    @staticmethod
    def _invalid(detail: str, envelope: AgentEnvelope) -> ProtocolError:
        return ProtocolError(code="invalid", detail=detail, in_reply_to_seq=envelope.seq)

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
        self._liveness.hello_arrived(envelope)
        state, refused, outbox = await _db(_hello)(self._node_id, hello)
        self._liveness.state = state
        # A hello that waited behind others (a cold start of the fleet) makes a node watched whose newest
        # recorded sign of life is that old hello, while fresher heartbeats wait behind it on this link:
        # the node is judged from the moment it joined, as the watchdog judges a node it has no entry for.
        self._liveness.record_last_seen(time.time())
        await self._refuse(envelope, "agent_snapshot_refused", refused)
        log.info(
            "agent %s hello: %d devices, session %s, node %s",
            self.node_name,
            len(hello.devices),
            envelope.session,
            state,
        )
        async with self._outbox_lock:
            await self._send_pending(outbox)
        self._greeted = True
        # its heartbeats waited behind all of this; the hello is handled once Redis has the node's time
        await asyncio.shield(self._liveness.record_last_seen(time.time()))

    async def _on_heartbeat(self, envelope: AgentEnvelope) -> None:
        """The database part of the newest heartbeat received (one is queued at a time: while the link's
        database work waits, its heartbeats do not pile up behind it)."""
        envelope = self._liveness.take_newest(envelope)
        heartbeat = cast(Heartbeat, envelope.message)
        stored = await self._liveness.stored()
        snapshots = [s.model_dump(mode="json") for s in heartbeat.snapshots]
        if snapshots != self._snapshots:  # written only when the list changes: the 1 Hz path stays cheap
            self._snapshots = snapshots
            allowed, refused = await _db(check_snapshot_adverts)(self._node_id, heartbeat.snapshots)
            await _db(do_record_snapshots)(self._node_id, [s.model_dump(mode="json") for s in allowed])
            await self._refuse(envelope, "agent_snapshot_refused", refused)
        if not await self._liveness.after_heartbeat(heartbeat, stored):
            await self.close(code=CLOSE_UNAUTHORIZED)  # the node was deleted under us

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
        handler = report_handler(report)
        # a failure's evidence does not wait behind the process's other database work
        db = on_failure_lane if handler is record_failure_report else _db
        held = (report.task_id, report.epoch, report.rank)
        if held not in self._held:  # a fact about the past: checked once per rank and epoch
            refusal = await db(check_worker_report)(self._node_id, report)
            if refusal is not None:
                await self._refuse(envelope, "agent_report_refused", [refusal])
                return
            if len(self._held) >= HELD_REMEMBERED:
                self._held.clear()
            self._held.add(held)
        if report.event.kind == "iteration_stats":  # stored with the process's other links' stats
            stats_batch().add(report, lambda why: self._send_error(self._invalid(why, envelope)))
            return
        if report.event.kind == "exited":  # a finished rank's last stats count before its exit does
            await stats_batch().flushed()
        outcome = await db(handler)(self._node_id, report)
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
        """A command was committed to this node's outbox: it is sent at once, on a task of its own (not
        behind the link's other database work: a failure's answer must not wait for the link's queued
        acks or heartbeats). Before the hello is handled nothing is sent (the hello sends all that is
        pending); a wake-up while a send is due already is taken by that send."""
        if not self._greeted or self._sends_due:
            return
        self._sends_due = True
        self._sender = asyncio.ensure_future(self._send_woken())

    async def _send_woken(self) -> None:
        async with self._outbox_lock:
            self._sends_due = False  # a wake-up from here on needs another send
            try:
                await self._send_pending()
            except Exception:
                log.exception("agent %s: pending commands could not be sent", self.node_name)
                await self.close(code=CLOSE_INTERNAL)

    async def node_state(self, message: dict[str, Any]) -> None:
        """The node's state changed (``fleet.outbox.NODE_STATE_EVENT``)."""
        self._liveness.state = str(message.get("state") or "") or None

    async def agent_superseded(self, message: dict[str, Any]) -> None:
        if message.get("by") != self.channel_name:
            log.info("agent link of %s superseded by a newer connection", self.node_name)
            self._superseded = True
            await self.close(code=CLOSE_SUPERSEDED)

    # --- frames to the agent -----------------------------------------------------------------------

    async def _send_pending(self, outbox: Outbox | None = None) -> None:
        """Send what the node's outbox holds (``outbox``: as read already; None: read it now, on the
        failure lane: a command may be a failure's answer): snapshot keys not yet granted on this socket,
        then the pending commands in order; one database call before, one after."""
        if outbox is None:
            outbox = await on_failure_lane(read_outbox)(self._node_id)
        for task_id, secret in outbox.snapshot_keys.items():
            if (task_id, secret) not in self._granted:
                self._granted.add((task_id, secret))
                await self._send_envelope(SnapshotGrant(task_id=task_id, secret=secret))
        sent: list[AgentCommand] = []
        undeliverable: list[tuple[AgentCommand, str]] = []
        for row in outbox.commands:
            try:
                message = command_message(row)
            except UndeliverableCommand as exc:
                log.error("agent %s: command %s undeliverable: %s", self.node_name, row.command_id, exc)
                undeliverable.append((row, str(exc)))
                continue
            await self._send_envelope(message)
            sent.append(row)
        if sent or undeliverable:
            await on_failure_lane(settle_sends)(sent, undeliverable)

    async def _send_error(self, error: ProtocolError) -> None:
        await self._send_envelope(error)

    async def _send_envelope(self, message: Any) -> None:
        async with self._send_lock:  # the reading side and the sequenced work both answer: one order
            self._seq += 1
            envelope = CoordinatorEnvelope(
                node=COORDINATOR_NODE, session=self.session or "-", seq=self._seq, message=message
            )
            await self.send(text_data=encode(envelope))
