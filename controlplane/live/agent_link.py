"""The coordinator side of the agent link (DESIGN §2, §4, §5.1): one WebSocket per node agent.

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
- ``heartbeat``: one ``UPDATE … RETURNING state``; only a node that is not healthy costs more (a
  joining node whose agent is still warming costs nothing more).
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
  silent at once: see ``fleet/tasks.py``).

Unexpected errors while persisting (e.g. the database is down) close the socket with 1011 so the agent
reconnects and re-sends what it buffered; nothing is acknowledged that was not stored.
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, cast

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.db import DataError, transaction
from django.utils import timezone

from controlplane.apps.accounts.services import do_record_audit
from controlplane.apps.common.errors import StaleState
from controlplane.apps.fleet.authority import (
    Refusal,
    check_snapshot_adverts,
    check_worker_report,
    do_record_refusal,
    list_snapshot_keys,
    task_pk,
)
from controlplane.apps.fleet.choices import DEVICE_MACHINE, CommandState, CommandType, DeviceState, NodeState
from controlplane.apps.fleet.models import AgentCommand, Device, Node
from controlplane.apps.fleet.outbox import (
    AGENT_SUPERSEDED_EVENT,
    UndeliverableCommand,
    agent_group,
    command_message,
)
from controlplane.apps.fleet.selectors import get_node_for_token, list_pending_commands
from controlplane.apps.fleet.services import (
    do_ack_command,
    do_count_device_error,
    do_enqueue_command,
    do_mark_command_sent,
    do_record_agent_heartbeat,
    do_record_snapshots,
    do_requeue_unacked_commands,
    do_set_device_state,
    do_set_node_state,
)
from controlplane.apps.incidents import choices as incident_choices
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.incidents.selectors import caused_by_drill, drills_sent
from controlplane.apps.incidents.services import FailureReport, do_raise_alert, do_record_failure_event
from controlplane.apps.metrics.choices import MetricKind
from controlplane.apps.metrics.services import Sample, do_record_samples
from controlplane.apps.planning.transitions import do_record_rank_resumed, on_command_settled
from controlplane.apps.planning.triggers import request_failure_handling, request_replan
from controlplane.apps.training.choices import TERMINAL_TASK_STATES
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.apps.training.services import do_mark_rank_finished, do_record_progress
from controlplane.core import failures
from controlplane.core.planning import DEVICE_KINDS
from controlplane.core.protocol import (
    COORDINATOR_NODE,
    Ack,
    AgentEnvelope,
    CoordinatorEnvelope,
    DeviceInfo,
    Heartbeat,
    Hello,
    IterationStats,
    ProtocolError,
    ProtocolViolation,
    SnapshotGrant,
    TransitionReport,
    WorkerReport,
    decode_agent_frame,
    encode,
)

log = logging.getLogger(__name__)

CLOSE_UNAUTHORIZED = 4401
"""Close code: missing, malformed or unknown node token (the agent should not retry blindly)."""
CLOSE_SUPERSEDED = 4409
"""Close code: a newer connection authenticated as the same node."""
CLOSE_INTERNAL = 1011
"""Close code: the coordinator could not persist a message; reconnect and re-send."""

_BEARER = re.compile(r"^Bearer\s+(\S+)\s*$", re.IGNORECASE)


def _bearer_token(scope: dict[str, Any]) -> str | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            match = _BEARER.match(value.decode("latin-1"))
            return match.group(1) if match else None
    return None


# --------------------------------------------------------------------------------------------------
# Synchronous handlers: each one is a short transaction through the services.
# --------------------------------------------------------------------------------------------------


def device_kind_key(info: DeviceInfo) -> str:
    """The planner's device-kind key (``core.planning.DEVICE_KINDS``) for a reported device, or a slug of
    the reported name when the kind is not known to the planner."""
    if info.kind == "cpu":
        return "cpu-slot"
    name = info.name.lower()
    gib = info.memory_bytes / 2**30
    for family in ("h200", "h100", "a100"):
        if family in name:
            if family == "h200":
                return "h200"
            return f"{family}-{'40g' if family == 'a100' and gib < 60 else '80g'}"
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-")[:64] or "unknown"


def _device_memory(info: DeviceInfo, kind: str) -> int:
    known = DEVICE_KINDS.get(kind)
    if info.memory_bytes == 0 and known is not None:  # CPU slots report no memory of their own
        return int(known.memory_bytes)
    return info.memory_bytes


@transaction.atomic
def apply_hello(node_id: int, hello: Hello) -> tuple[str, list[Refusal]]:
    """Inventory upsert, node → healthy, unacked commands back to pending. Returns the node state and
    the snapshot adverts refused (``fleet.authority``: not recorded)."""
    node = Node.objects.select_for_update().get(pk=node_id)
    existing = {d.index: d for d in Device.objects.filter(node=node)}
    reported = set()
    for info in hello.devices:
        reported.add(info.index)
        kind = device_kind_key(info)
        memory = _device_memory(info, kind)
        device = existing.get(info.index)
        if device is None:
            Device.objects.create(node=node, index=info.index, kind=kind, memory_bytes=memory)
        elif (device.kind, device.memory_bytes) != (kind, memory):
            Device.objects.filter(pk=device.pk).update(kind=kind, memory_bytes=memory)
    for index, device in existing.items():  # gone from the inventory: the device failed
        if index not in reported and DEVICE_MACHINE.can(device.state, DeviceState.FAILED):
            do_set_device_state(device, DeviceState.FAILED)
    Node.objects.filter(pk=node.pk).update(
        agent_version=hello.agent_version,
        last_heartbeat_at=timezone.now(),
        address=node.address or hello.hostname[:255],
    )
    do_record_snapshots(node.pk, [], hello.snapshot_endpoint or "")
    allowed, refused = check_snapshot_adverts(node.pk, hello.snapshots)
    do_record_snapshots(node.pk, [s.model_dump(mode="json") for s in allowed])
    node = _bring_back(node, "agent said hello", warming=hello.warming)
    do_requeue_unacked_commands(node)
    _report_missing_workers(node, hello)
    _stop_stray_workers(node, hello)
    return node.state, refused


_LIVE_WORKER_STATES = ("init", "healthy", "unhealthy")


def _stop_stray_workers(node: Node, hello: Hello) -> None:
    """Workers the hello lists for a task that no longer runs on this node (it moved while the node was
    cut off, or it ended) are stopped: left alone they would train a second copy of the task and
    write its checkpoints. A task still allocated here is left to its transitions."""
    listed = {w.task_id for w in hello.workers if w.state in _LIVE_WORKER_STATES}
    for task_id in sorted(listed):
        pk = _task_pk(task_id)
        task = TrainingTask.objects.filter(pk=pk).first() if pk is not None else None
        if task is None:
            continue  # not ours to name in a command (no task row, no epoch)
        if (
            task.state not in TERMINAL_TASK_STATES
            and task.allocations.filter(active=True, device__node=node).exists()
        ):
            continue
        if AgentCommand.objects.filter(
            node=node,
            task=task,
            type=CommandType.STOP_WORKERS,
            state__in=[CommandState.PENDING, CommandState.SENT],
        ).exists():
            continue
        log.warning("node %s still runs task %s, which no longer runs there: stopping it", node.name, task.pk)
        do_enqueue_command(
            node, CommandType.STOP_WORKERS, {"task": task.pk, "grace_s": 5.0}, task.pk, task.epoch
        )


_MISSING_NS = uuid.UUID("3b0f6f3e-5f0e-4d7e-9d55-1c2a4b8e7f21")


def _report_missing_workers(node: Node, hello: Hello) -> None:
    """An agent that restarted (a new process) lost its workers — and the reports it had not sent. A
    rank the node should run at its task's current epoch (that epoch's transition completed, so it
    was running) but that the hello does not list becomes a failure event, as process supervision
    would have reported it."""
    listed = {(w.task_id, w.epoch, w.rank) for w in hello.workers}
    allocations = Allocation.objects.filter(
        active=True, device__node=node, task__state__in=["running", "reconfiguring"]
    ).select_related("task", "device")
    for a in allocations:
        task = a.task
        if a.epoch != task.epoch or (str(task.pk), task.epoch, a.rank) in listed:
            continue
        if task.transitions.filter(epoch=task.epoch).exclude(state="completed").exists():
            continue  # still being started: its commands may not have reached this agent yet
        evidence = failures.Evidence(
            detector=failures.DetectorKind.PROCESS_EXIT,
            node=node.name,
            device=a.device.index,
            task_id=str(task.pk),
            message="worker not running after the agent reconnected (agent restart)",
            occurred_at=timezone.now().timestamp(),
        )
        c = failures.classify(evidence)
        report_id = uuid.uuid5(_MISSING_NS, f"{task.pk}:{task.epoch}:{a.rank}:{hello.hostname}:{node.pk}")
        stored, created = do_record_failure_event(
            FailureReport(
                detector=incident_choices.Detector.PROCESS_SUPERVISION,
                kind="worker_missing",
                severity=incident_choices.Severity(c.severity.value),
                occurred_at=timezone.now(),
                action=ACTION_FOR[c.action],
                summary=f"rank {a.rank} missing after the agent of {node.name} reconnected: {c.reason}",
                evidence={
                    "report": {"rank": a.rank, "event": {"kind": "missing"}},
                    "core": _evidence_json(evidence),
                    "classification": _classification_json(c),
                },
                report_id=report_id,
                node=node,
                device=a.device,
                task=task,
            )
        )
        if created:
            FailureEvent.objects.filter(pk=stored.pk).update(task_epoch=task.epoch)
            request_failure_handling(stored.pk)


def _bring_back(node: Node, reason: str, warming: bool = False) -> Node:
    """A node that shows signs of life: lost → joining → healthy, joining/suspect → healthy. Isolated and
    draining nodes stay where the operator put them.

    ``warming``: the agent's warm spares are still starting, so a rank placed there now would start
    cold; a lost or joining node then stops at ``joining`` (no new ranks, no ``node_joined`` re-plan)
    until a heartbeat says the agent is warm (the agent bounds warming, ``agents.supervisor.
    WARMING_MAX_S``). A suspect node keeps its workers and its agent: healthy at once."""
    if node.state == NodeState.LOST:
        node = do_set_node_state(node, NodeState.JOINING, reason)
    if node.state == NodeState.JOINING and warming:
        log.info("node %s stays joining: its agent is warming (%s)", node.name, reason)
        return node
    if node.state in (NodeState.JOINING, NodeState.SUSPECT):
        node = do_set_node_state(node, NodeState.HEALTHY, reason)
        request_replan("node_joined")  # capacity came back: tasks may grow (a no-op plan otherwise)
    return node


@transaction.atomic
def revive_node(node_id: int, warming: bool = False) -> str:
    """A heartbeat arrived from a node that is not healthy (the watchdog thought it silent, or it is
    joining and its agent just became warm)."""
    node = Node.objects.select_for_update().get(pk=node_id)
    return _bring_back(
        node, "agent warm" if node.state == NodeState.JOINING else "heartbeat resumed", warming
    ).state


@transaction.atomic
def mark_link_closed(node_id: int, code: int | None) -> str | None:
    """Socket closed: a healthy node becomes suspect at once (DESIGN §5.1 socket state)."""
    node = Node.objects.select_for_update().filter(pk=node_id).first()
    if node is None:
        return None
    if node.state == NodeState.HEALTHY:
        node = do_set_node_state(node, NodeState.SUSPECT, f"agent link closed (code {code})")
    return node.state


@transaction.atomic
def record_impersonation(node_id: int, claimed: str, seq: int) -> None:
    node = Node.objects.get(pk=node_id)
    do_record_audit(None, "agent_impersonation_refused", node, after={"claimed_node": claimed, "seq": seq})


# --- worker reports ---------------------------------------------------------------------------------

_CORE_DETECTOR = {
    "exited": failures.DetectorKind.PROCESS_EXIT,
    "exception": failures.DetectorKind.EXCEPTION,
    "hang": failures.DetectorKind.HANG,
    "straggler": failures.DetectorKind.STRAGGLER,
}
_WIRE_DETECTOR = {
    "exited": "process_supervision",
    "exception": "exception_propagation",
    "hang": "statistical_monitoring",
    "straggler": "statistical_monitoring",
}
ACTION_FOR = {
    failures.Action.RETRY_IN_PLACE: incident_choices.Action.RETRY_IN_PLACE,
    failures.Action.RESTART_PROCESS: incident_choices.Action.RESTART_PROCESSES,
    failures.Action.ISOLATE_AND_RECONFIGURE: incident_choices.Action.ISOLATE_AND_REPLAN,
}
_POLICY = failures.EscalationPolicy()
_HISTORY_LIMIT = 100


_task_pk = task_pk


def _evidence_of(node_name: str, report: WorkerReport) -> failures.Evidence:
    event = report.event
    fields: dict[str, Any] = {}
    if event.kind == "exited":
        fields = {"exit_code": event.exit_code, "signal": event.signal, "message": event.signal_name or ""}
    elif event.kind == "exception":
        fields = {"exception_type": event.exc_type, "message": event.message}
    elif event.kind == "hang":
        fields = {
            "message": f"iteration {event.iteration} ran {event.elapsed_s:.2f}s > {event.threshold_s:.2f}s"
        }
    elif event.kind == "straggler":
        fields = {"message": f"rank {report.rank} compute {event.ratio:.2f}x its peers"}
    return failures.Evidence(
        detector=_CORE_DETECTOR[event.kind],
        node=node_name,
        device=report.device,
        task_id=report.task_id,
        occurred_at=report.occurred_at.timestamp(),
        **fields,
    )


def _evidence_json(ev: failures.Evidence) -> dict[str, Any]:
    return {
        "detector": str(ev.detector),
        "exit_code": ev.exit_code,
        "signal": ev.signal,
        "exception_type": ev.exception_type,
        "message": ev.message,
        "node": ev.node,
        "device": ev.device,
        "task_id": ev.task_id,
        "occurred_at": ev.occurred_at,
    }


def _classification_json(c: failures.Classification) -> dict[str, Any]:
    return {
        "severity": str(c.severity),
        "action": str(c.action),
        "category": str(c.category),
        "rule": c.rule,
        "reason": c.reason,
        "escalated_from": str(c.escalated_from) if c.escalated_from else None,
    }


def _history(node: Node, before: float) -> list[failures.FailureRecord]:
    """This node's recent classified events (those stored by the agent link carry their core evidence
    and classification), oldest first, for the escalation policy."""
    since = timezone.now() - timedelta(seconds=_POLICY.recurrence_window_s)
    rows = FailureEvent.objects.filter(node=node, occurred_at__gte=since).order_by("-occurred_at")[
        :_HISTORY_LIMIT
    ]
    drills = drills_sent(node.pk, since)
    records = []
    for row in rows:
        if caused_by_drill(row.occurred_at, drills):
            continue  # a fault drill's failures do not make the node's next ones worse
        core, cls = row.evidence.get("core"), row.evidence.get("classification")
        if not isinstance(core, dict) or not isinstance(cls, dict):
            continue
        try:
            records.append(
                failures.FailureRecord(
                    failures.Evidence(**core),
                    failures.Classification(
                        severity=failures.Severity(cls["severity"]),
                        action=failures.Action(cls["action"]),
                        category=failures.Category(cls["category"]),
                        rule=cls["rule"],
                        reason=cls["reason"],
                        escalated_from=failures.Severity(cls["escalated_from"])
                        if cls.get("escalated_from")
                        else None,
                    ),
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    return [r for r in reversed(records) if r.evidence.occurred_at <= before]


@transaction.atomic
def record_worker_report(node_id: int, report: WorkerReport) -> str:
    """Persist one worker report; returns what happened (for the log)."""
    event = report.event
    if event.kind == "iteration_stats":
        return _record_iteration_stats(report, event)
    if event.kind == "transition":
        return _record_transition_report(report, event)
    if event.kind == "exited" and event.expected:
        return _record_expected_exit(node_id, report, event)
    if event.kind == "started":
        return f"{event.kind}: no failure"
    report_id = uuid.UUID(report.report_id)
    if FailureEvent.objects.filter(report_id=report_id).exists():
        return "duplicate report"
    node = Node.objects.get(pk=node_id)
    evidence = _evidence_of(node.name, report)
    c = failures.classify(evidence, _history(node, evidence.occurred_at), _POLICY)
    device = Device.objects.filter(node=node, index=report.device).first()
    task_pk = _task_pk(report.task_id)
    task = TrainingTask.objects.filter(pk=task_pk).first() if task_pk is not None else None
    stored, created = do_record_failure_event(
        FailureReport(
            detector=incident_choices.Detector(report.detector or _WIRE_DETECTOR[event.kind]),
            kind=c.rule.replace("-", "_"),
            severity=incident_choices.Severity(c.severity.value),
            occurred_at=report.occurred_at,
            action=ACTION_FOR[c.action],
            summary=c.reason,
            evidence={
                "report": report.model_dump(mode="json"),
                "core": _evidence_json(evidence),
                "classification": _classification_json(c),
            },
            report_id=report_id,
            node=node,
            device=device,
            task=task,
        )
    )
    if not created:
        return "duplicate report"
    FailureEvent.objects.filter(pk=stored.pk).update(task_epoch=report.epoch)
    current = task is not None and report.epoch == task.epoch
    if current or task is None:
        request_failure_handling(stored.pk)
    else:  # fencing: evidence from an older epoch never triggers an action
        now = timezone.now()
        FailureEvent.objects.filter(pk=stored.pk).update(handled_at=now, resolved_at=now)
    if device is not None:
        do_count_device_error(device, c.severity.value)
    if c.severity is failures.Severity.SEV1:
        do_raise_alert(
            incident_choices.Severity.SEV1,
            f"{node.name}/{report.device}: {c.reason}",
            source_event=stored,
            node=node,
        )
    return f"failure event {stored.pk} {c.severity} {c.rule}"


def _current_task(report: WorkerReport) -> TrainingTask | None:
    """The report's task when the report belongs to its current epoch (fencing), else None."""
    task_pk = _task_pk(report.task_id)
    if task_pk is None:
        return None
    return TrainingTask.objects.filter(pk=task_pk, epoch=report.epoch).first()


def _record_transition_report(report: WorkerReport, event: TransitionReport) -> str:
    task = _current_task(report)
    if task is None:
        return "transition report: stale epoch or unknown task"
    do_record_rank_resumed(
        task.pk, report.epoch, report.rank, event.iteration, event.iteration, event.model_dump(mode="json")
    )
    do_record_progress(task, event.iteration)
    return f"transition report of rank {report.rank} (source {event.source})"


def _record_expected_exit(node_id: int, report: WorkerReport, event: Any) -> str:
    """A rank exited on purpose. Exit code 0 at the current epoch on a healthy node means it finished its
    iterations; when every rank has, the task is completed (and the workload manager re-plans)."""
    task = _current_task(report)
    finished = event.exit_code == 0 and event.signal is None
    if task is None or not finished:
        return "exited: expected"
    if not Node.objects.filter(pk=node_id, state=NodeState.HEALTHY).exists():
        return "exited: expected (node not healthy: not counted as finished)"
    completed = do_mark_rank_finished(task, report.epoch, report.rank)
    return f"exited: rank {report.rank} finished{'; task completed' if completed else ''}"


def _record_iteration_stats(report: WorkerReport, stats: IterationStats) -> str:
    """Every rank's progress at the current epoch advances the task and its transition's resume step.
    Rank 0's interval summary becomes the task's samples. Iteration time is the same on every rank
    (the step ends with a collective); tokens and model FLOPs are the rank's share of the global batch
    (the worker splits it evenly), so the task's rates are the share times the number of active ranks."""
    task = _current_task(report)
    if task is not None and stats.iterations > 0:
        # lock order as in the orchestrator (transition step, then task row): no deadlock with it
        first, last = stats.first_iteration, stats.last_iteration
        do_record_rank_resumed(task.pk, report.epoch, report.rank, first, last)
        do_record_progress(task, stats.last_iteration)
    task_pk = _task_pk(report.task_id)
    if report.rank != 0 or task_pk is None or stats.iterations == 0 or stats.median_s <= 0:
        return "iteration stats: not recorded (not rank 0 or empty)"
    if not TrainingTask.objects.filter(pk=task_pk).exists():
        return f"iteration stats: unknown task {report.task_id!r}"
    ranks = Allocation.objects.filter(task_id=task_pk, active=True).count() or 1
    per_iteration_s = stats.median_s
    at = report.detected_at
    samples = [Sample(MetricKind.ITERATION_TIME, per_iteration_s, at, task_pk, stats.last_iteration)]
    samples.append(
        Sample(
            MetricKind.TOKENS_PER_S,
            stats.tokens / stats.iterations / per_iteration_s * ranks,
            at,
            task_pk,
            stats.last_iteration,
        )
    )
    samples.append(
        Sample(
            MetricKind.ACHIEVED_FLOPS,
            stats.model_flops / stats.iterations / per_iteration_s * ranks,
            at,
            task_pk,
            stats.last_iteration,
        )
    )
    return f"iteration stats: {do_record_samples(samples)} samples"


# --- acks and the outbox ---------------------------------------------------------------------------

_OK_OUTCOMES = frozenset({"accepted", "done", "duplicate"})


@transaction.atomic
def record_ack(node_id: int, ack: Ack) -> str | None:
    """Acknowledge the node's outbox row; returns a refusal detail when the ack names no command of
    this node."""
    try:
        command_id = uuid.UUID(ack.command_id)
    except ValueError:
        return f"ack: command_id {ack.command_id!r} is not a UUID"
    row = AgentCommand.objects.select_for_update().filter(command_id=command_id, node_id=node_id).first()
    if row is None:
        return f"ack: no command {ack.command_id} for this node"
    if row.state == CommandState.PENDING:  # requeued on reconnect, but the agent had it already
        do_mark_command_sent(row)
        row.refresh_from_db()
    ok = ack.outcome in _OK_OUTCOMES
    if do_ack_command(row, ok, "" if ok else f"{ack.outcome}: {ack.detail}".strip(": ")):
        on_command_settled(row)
    return None


def pending_commands(node_id: int) -> list[AgentCommand]:
    return list(list_pending_commands(Node(pk=node_id)).select_related("task"))  # its snapshot key


def mark_sent(command: AgentCommand) -> None:
    with contextlib.suppress(StaleState):  # another socket of the node sent it, or it was acked
        do_mark_command_sent(command)


def fail_undeliverable(command: AgentCommand, error: str) -> None:
    with contextlib.suppress(StaleState):
        do_ack_command(command, ok=False, error=f"undeliverable: {error}")


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

    @property
    def _node_id(self) -> int:
        if self.node_id is None:
            raise RuntimeError("agent link used before authentication")
        return self.node_id

    async def connect(self) -> None:
        self._impersonations = set()
        self._granted = set()
        token = _bearer_token(self.scope)
        node = await _db(get_node_for_token)(token) if token else None
        if node is None:
            client = self.scope.get("client")
            why = "missing or malformed Authorization header" if token is None else "unknown node token"
            log.warning("agent link refused from %s: %s", client, why)
            await self.accept()
            await self._send_error(ProtocolError(code="unauthorized", detail=f"{why}; closing"))
            await self.close(code=CLOSE_UNAUTHORIZED)
            return
        self.node_id, self.node_name = node.pk, node.name
        group = agent_group(node.name)
        await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        await self.channel_layer.group_send(group, {"type": AGENT_SUPERSEDED_EVENT, "by": self.channel_name})
        log.info("agent link of %s open", node.name)

    async def disconnect(self, code: int) -> None:
        if self.node_id is None:
            return
        await self.channel_layer.group_discard(agent_group(self.node_name), self.channel_name)
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
        if self.node_id is None:
            return
        raw = text_data if text_data is not None else (bytes_data or b"")
        try:
            envelope = decode_agent_frame(raw)
        except ProtocolViolation as refusal:
            log.info("agent %s: refused frame: %s", self.node_name, refusal)
            await self._send_error(refusal.error)
            return
        if envelope.node != self.node_name:
            await self._refuse_impersonation(envelope)
            return
        mtype = envelope.message.type
        new_session = mtype == "hello" and envelope.session != self.session
        if self._last_seq is not None and envelope.seq <= self._last_seq and not new_session:
            await self._send_error(
                ProtocolError(
                    code="out_of_order",
                    detail=f"seq {envelope.seq} is not above the previous frame's {self._last_seq}",
                    in_reply_to_seq=envelope.seq,
                )
            )
            return
        self._last_seq = envelope.seq
        if self.session is None and mtype != "hello":
            await self._send_error(
                ProtocolError(
                    code="invalid",
                    detail=f"the first frame must be hello, got {mtype}",
                    in_reply_to_seq=envelope.seq,
                )
            )
            return
        handler = self._handlers()[mtype]
        try:
            await handler(envelope)
        except DataError as exc:  # a value the database cannot hold: the frame's fault, not ours
            log.warning(
                "agent %s: %s (seq %s) refused by the database: %s", self.node_name, mtype, envelope.seq, exc
            )
            detail = f"{mtype}: a value cannot be stored: {str(exc).splitlines()[0][:500]}"
            await self._send_error(ProtocolError(code="invalid", detail=detail, in_reply_to_seq=envelope.seq))
        except Exception:
            log.exception("agent %s: %s (seq %s) could not be stored", self.node_name, mtype, envelope.seq)
            await self.close(code=CLOSE_INTERNAL)

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
        if len({d.index for d in hello.devices}) != len(hello.devices):
            await self._send_error(
                ProtocolError(
                    code="invalid",
                    detail="hello: device indexes must be unique",
                    in_reply_to_seq=envelope.seq,
                )
            )
            return
        self.session = envelope.session
        self._snapshots = [s.model_dump(mode="json") for s in hello.snapshots]
        state, refused = await _db(apply_hello)(self._node_id, hello)
        await self._refuse(envelope, "agent_snapshot_refused", refused)
        log.info(
            "agent %s hello: %d devices, session %s, node %s",
            self.node_name,
            len(hello.devices),
            envelope.session,
            state,
        )
        await self._send_pending()

    async def _on_heartbeat(self, envelope: AgentEnvelope) -> None:
        heartbeat = cast(Heartbeat, envelope.message)
        state = await _db(do_record_agent_heartbeat)(self._node_id)
        snapshots = [s.model_dump(mode="json") for s in heartbeat.snapshots]
        if snapshots != self._snapshots:  # written only when the list changes: the 1 Hz path stays cheap
            self._snapshots = snapshots
            allowed, refused = await _db(check_snapshot_adverts)(self._node_id, heartbeat.snapshots)
            await _db(do_record_snapshots)(self._node_id, [s.model_dump(mode="json") for s in allowed])
            await self._refuse(envelope, "agent_snapshot_refused", refused)
        if state is None:  # the node was deleted under us
            await self.close(code=CLOSE_UNAUTHORIZED)
        elif state in (NodeState.SUSPECT, NodeState.LOST) or (
            state == NodeState.JOINING and not heartbeat.warming  # joining and warming: nothing to do
        ):
            new = await _db(revive_node)(self._node_id, heartbeat.warming)
            log.info("agent %s: heartbeat while %s -> %s", self.node_name, state, new)

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
        outcome = await _db(record_worker_report)(self._node_id, report)
        log.info("agent %s report %s: %s", self.node_name, report.report_id, outcome)

    async def _on_ack(self, envelope: AgentEnvelope) -> None:
        ack = cast(Ack, envelope.message)
        refusal = await _db(record_ack)(self._node_id, ack)
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
        if self.session is not None:  # before hello, hello itself sends everything pending
            await self._send_pending()

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
        self._seq += 1
        envelope = CoordinatorEnvelope(
            node=COORDINATOR_NODE, session=self.session or "-", seq=self._seq, message=message
        )
        await self.send(text_data=encode(envelope))
