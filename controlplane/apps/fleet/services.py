"""Fleet services: the one write path for nodes, devices and the agent command outbox."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, get_args

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from controlplane.apps.accounts.services import Actor, do_record_audit
from controlplane.apps.common.broadcast import send_event_on_commit
from controlplane.apps.common.cas import swap_state
from controlplane.apps.common.errors import Conflict, InvalidInput, StaleState
from controlplane.apps.common.triggers import request_replan
from controlplane.apps.fleet.choices import (
    COMMAND_MACHINE,
    DEVICE_MACHINE,
    DRAINABLE_NODE_STATES,
    NODE_MACHINE,
    CommandState,
    CommandType,
    DeviceState,
    NodeState,
)
from controlplane.apps.fleet.models import AgentCommand, Device, Node
from controlplane.apps.fleet.outbox import notify_agent_on_commit, notify_node_state_on_commit
from controlplane.apps.fleet.tokens import hash_node_token, new_node_token
from controlplane.apps.training.choices import TaskState
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.core.protocol import Command, FaultKind, FaultSpec


@dataclass(frozen=True)
class DeviceSpec:
    index: int
    kind: str
    memory_bytes: int


def node_event(node: Node) -> dict[str, Any]:
    return {"id": node.pk, "name": node.name, "state": node.state, "quarantined": node.quarantined}


def device_event(device: Device) -> dict[str, Any]:
    return {"id": device.pk, "node": device.node_id, "state": device.state}


# --- registration and tokens -------------------------------------------------------------------


def check_register_node(name: str, devices: list[DeviceSpec]) -> None:
    errors: dict[str, list[str]] = {}
    if Node.objects.filter(name=name).exists():
        errors["name"] = [f"A node named {name!r} already exists."]
    indexes = [d.index for d in devices]
    if len(set(indexes)) != len(indexes):
        errors["devices"] = ["Device indexes must be unique on a node."]
    if any(d.memory_bytes <= 0 for d in devices):
        errors.setdefault("devices", []).append("Device memory must be positive.")
    if errors:
        raise InvalidInput(errors)


@transaction.atomic
def do_register_node(
    actor: Actor, name: str, address: str = "", devices: list[DeviceSpec] | None = None
) -> tuple[Node, str]:
    """Create a node with its devices; returns the plaintext agent token (shown this once only)."""
    devices = devices or []
    check_register_node(name, devices)
    token = new_node_token()
    node = Node.objects.create(name=name, address=address, token_hash=hash_node_token(token))
    Device.objects.bulk_create(
        Device(node=node, index=d.index, kind=d.kind, memory_bytes=d.memory_bytes) for d in devices
    )
    do_record_audit(actor, "register_node", node, after={"name": name, "devices": len(devices)})
    send_event_on_commit("node.registered", node_event(node))
    return node, token


@transaction.atomic
def do_rotate_node_token(actor: Actor, node: Node) -> str:
    token = new_node_token()
    Node.objects.filter(pk=node.pk).update(token_hash=hash_node_token(token))
    do_record_audit(actor, "rotate_node_token", node)
    return token


# --- node state ----------------------------------------------------------------------------------


def _announce_node_state(node: Node, reason: str) -> None:
    """Once the state change commits: the dashboards' live event, and the node's agent link (which keeps
    a healthy node's heartbeats off PostgreSQL, so it must hear that its node is no longer healthy)."""
    send_event_on_commit("node.state", {**node_event(node), "reason": reason})
    notify_node_state_on_commit(node.name, node.state)


@transaction.atomic
def do_set_node_state(node: Node, new: NodeState, reason: str = "") -> Node:
    """Health-monitor transitions (joining→healthy, healthy→suspect→lost …), compare-and-swap. An
    isolation records when and why (shown to operators, and the start of its probation window)."""
    swap_state(Node, node.pk, NODE_MACHINE, node.state, new)
    if new == NodeState.ISOLATED:
        Node.objects.filter(pk=node.pk).update(isolated_at=timezone.now(), isolation_reason=reason)
    node.refresh_from_db()
    _announce_node_state(node, reason)
    return node


def do_record_heartbeat(node: Node, agent_version: str | None = None) -> None:
    fields: dict[str, Any] = {"last_heartbeat_at": timezone.now()}
    if agent_version is not None:
        fields["agent_version"] = agent_version
    Node.objects.filter(pk=node.pk).update(**fields)


def do_record_agent_heartbeat(node_id: int, when: datetime | None = None) -> str | None:
    """A heartbeat stamped in PostgreSQL in ONE statement, returning the node's state (``UPDATE …
    RETURNING``) so the caller needs no second query to notice that a suspect or lost node is alive again.
    The agent link takes this path only for a node that is not healthy, once in a while for a healthy one
    (to re-read its state), and while Redis is unreachable (:mod:`controlplane.apps.fleet.last_seen` keeps
    the heartbeats otherwise). None when the node no longer exists."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Node._meta.db_table} SET last_heartbeat_at = %s WHERE id = %s RETURNING state",
            [when or timezone.now(), node_id],
        )
        row = cursor.fetchone()
    return None if row is None else str(row[0])


def do_record_snapshots(node_id: int, snapshots: list[dict[str, Any]], endpoint: str | None = None) -> None:
    """The in-memory snapshots a node's agent holds (state sources for transitions, docs/ARCHITECTURE.md
    §7.6)."""
    fields: dict[str, Any] = {"snapshots": snapshots}
    if endpoint is not None:
        fields["snapshot_endpoint"] = endpoint
    Node.objects.filter(pk=node_id).update(**fields)


def check_drain_node(node: Node) -> None:
    if node.state not in DRAINABLE_NODE_STATES:
        raise Conflict(f"Node {node.name} is {node.state} and cannot be drained.")


@transaction.atomic
def do_drain_node(actor: Actor, node: Node) -> Node:
    """Take a node out of service gracefully: no new work; its agent is told to drain."""
    check_drain_node(node)
    before = node.state
    swap_state(Node, node.pk, NODE_MACHINE, before, NodeState.DRAINING)
    node.refresh_from_db()
    do_enqueue_command(node, CommandType.DRAIN, {})
    do_record_audit(actor, "drain_node", node, {"state": before}, {"state": node.state})
    _announce_node_state(node, "drained by operator")
    request_replan("node_left")
    return node


@transaction.atomic
def do_quarantine_node(actor: Actor, node: Node, reason: str) -> Node:
    """Keep a node that keeps failing out of plans until an operator clears it (docs/ARCHITECTURE.md §7.2)."""
    if (
        Node.objects.filter(pk=node.pk, quarantined=False).update(quarantined=True, quarantine_reason=reason)
        != 1
    ):
        raise Conflict(f"Node {node.name} is already quarantined.")
    node.refresh_from_db()
    if NODE_MACHINE.can(node.state, NodeState.ISOLATED):
        swap_state(Node, node.pk, NODE_MACHINE, node.state, NodeState.ISOLATED)
        Node.objects.filter(pk=node.pk).update(isolated_at=timezone.now(), isolation_reason=reason)
        node.refresh_from_db()
    do_record_audit(actor, "quarantine_node", node, after={"reason": reason, "state": node.state})
    _announce_node_state(node, reason)
    return node


def check_clear_quarantine(node: Node) -> None:
    if not node.quarantined:
        raise Conflict(f"Node {node.name} is not quarantined.")


@transaction.atomic
def do_clear_quarantine(actor: Actor, node: Node) -> Node:
    """Operator clears the quarantine; an isolated node goes back to `joining` to be re-admitted."""
    check_clear_quarantine(node)
    if Node.objects.filter(pk=node.pk, quarantined=True).update(quarantined=False, quarantine_reason="") != 1:
        raise StaleState(f"Node {node.name} quarantine was cleared concurrently.")
    before_state = node.state
    node.refresh_from_db()
    if node.state == NodeState.ISOLATED:
        swap_state(Node, node.pk, NODE_MACHINE, NodeState.ISOLATED, NodeState.JOINING)
        node.refresh_from_db()
    do_record_audit(
        actor,
        "clear_quarantine",
        node,
        {"quarantined": True, "state": before_state},
        {"quarantined": False, "state": node.state},
    )
    _announce_node_state(node, "quarantine cleared")
    request_replan("node_joined")
    return node


# --- devices ---------------------------------------------------------------------------------------


@transaction.atomic
def do_set_device_state(device: Device, new: str, reason: str = "") -> Device:
    """A device's state, compare-and-swap; an isolation records when and why."""
    swap_state(Device, device.pk, DEVICE_MACHINE, device.state, new)
    if new == DeviceState.ISOLATED:
        Device.objects.filter(pk=device.pk).update(isolated_at=timezone.now(), isolation_reason=reason)
    device.refresh_from_db()
    send_event_on_commit("device.state", device_event(device))
    return device


# --- return to service (docs/ARCHITECTURE.md §7.2) ----------------------------------------------------


def check_return_node_to_service(node: Node) -> None:
    if node.quarantined:
        raise Conflict(
            f"Node {node.name} is quarantined ({node.quarantine_reason or 'no reason recorded'}): "
            "clear its quarantine to return it to service."
        )
    if node.state != NodeState.ISOLATED:
        raise Conflict(f"Node {node.name} is {node.state}, not isolated: it is not out of service.")


@transaction.atomic
def do_return_node_to_service(actor: Actor, node: Node, probation_s: float, reason: str) -> Node:
    """An isolated node goes back to `joining` (re-admitted on its next heartbeat) on probation for
    ``probation_s``; a re-plan puts its devices back to work. By an operator, or automatically after
    a clean probation window (``actor`` None)."""
    node = Node.objects.select_for_update(no_key=True).get(pk=node.pk)
    check_return_node_to_service(node)
    before = {"state": node.state, "isolation_reason": node.isolation_reason}
    swap_state(Node, node.pk, NODE_MACHINE, NodeState.ISOLATED, NodeState.JOINING)
    until = timezone.now() + timedelta(seconds=probation_s)
    Node.objects.filter(pk=node.pk).update(probation_until=until)
    node.refresh_from_db()
    after = {"state": node.state, "probation_until": until.isoformat(), "reason": reason}
    do_record_audit(actor, "return_node_to_service", node, before, after)
    _announce_node_state(node, reason)
    request_replan("node_joined")
    return node


def check_return_device_to_service(device: Device) -> None:
    if device.state != DeviceState.ISOLATED:
        raise Conflict(f"Device {device.node.name}/{device.index} is {device.state}, not isolated.")


@transaction.atomic
def do_return_device_to_service(actor: Actor, device: Device, probation_s: float, reason: str) -> Device:
    """An isolated device is healthy again, on probation for ``probation_s``; a re-plan puts it back
    to work. By an operator, or automatically after a clean probation window (``actor`` None)."""
    device = Device.objects.select_for_update(no_key=True).select_related("node").get(pk=device.pk)
    check_return_device_to_service(device)
    before = {"state": device.state, "isolation_reason": device.isolation_reason}
    swap_state(Device, device.pk, DEVICE_MACHINE, DeviceState.ISOLATED, DeviceState.HEALTHY)
    until = timezone.now() + timedelta(seconds=probation_s)
    Device.objects.filter(pk=device.pk).update(probation_until=until)
    device.refresh_from_db()
    after = {"state": device.state, "probation_until": until.isoformat(), "reason": reason}
    do_record_audit(actor, "return_device_to_service", device, before, after)
    send_event_on_commit("device.state", {**device_event(device), "reason": reason})
    request_replan("node_joined")
    return device


def do_count_device_error(device: Device, severity: str | None = None) -> None:
    fields: dict[str, Any] = {"error_count": F("error_count") + 1, "last_error_at": timezone.now()}
    if severity == "sev2":
        fields["sev2_count"] = F("sev2_count") + 1
    elif severity == "sev1":
        fields["sev1_count"] = F("sev1_count") + 1
    Device.objects.filter(pk=device.pk).update(**fields)


# --- agent command outbox ----------------------------------------------------------------------


def do_enqueue_command(
    node: Node,
    type: CommandType,
    payload: dict[str, Any],
    task_id: int | None = None,
    task_epoch: int | None = None,
    transition_id: int | None = None,
    command_id: uuid.UUID | None = None,
) -> AgentCommand:
    """Persist a command for ``node``; the agent link sends it and re-sends it until acked."""
    command = AgentCommand.objects.create(
        node=node,
        type=type,
        payload=payload,
        task_id=task_id,
        task_epoch=task_epoch,
        transition_id=transition_id,
        **({"command_id": command_id} if command_id is not None else {}),
    )
    send_event_on_commit(
        "agent_command.queued", {"node": node.name, "command_id": str(command.command_id), "type": type}
    )
    notify_agent_on_commit(node.name)
    return command


_ROW_FIELDS = frozenset({"type", "command_id", "task_id", "epoch", "snapshot_secret"})
"""Fields of a protocol command the outbox row holds itself (the snapshot key: on the task row only)."""


def do_enqueue_protocol_command(
    node: Node, command: Command, transition_id: int | None = None
) -> AgentCommand:
    """Persist ``command``, a protocol message (validated when it was built, so a bad payload fails here
    and not at delivery), for ``node``: the row keeps its id, type, task and epoch, the rest is its
    payload (:func:`controlplane.apps.fleet.outbox.command_message` rebuilds the same message)."""
    task_id = getattr(command, "task_id", None)
    return do_enqueue_command(
        node,
        CommandType(command.type),
        command.model_dump(mode="json", exclude=set(_ROW_FIELDS)),
        int(task_id) if task_id else None,
        getattr(command, "epoch", None),
        transition_id,
        command_id=uuid.UUID(command.command_id),
    )


COMMAND_WAKE_AFTER_S = 2.0
"""A command still pending this long lost its wake-up (the process that committed it died before it
could tell the agent link, or Redis blinked): the watchdog wakes the link again."""


def do_wake_stale_commands(older_than_s: float = COMMAND_WAKE_AFTER_S, limit: int = 200) -> int:
    """Wake the agent links of nodes that have commands pending for more than ``older_than_s``; the
    link sends them (a link that is not connected ignores it and sends them on reconnect). Returns
    the number of nodes woken."""
    since = timezone.now() - timedelta(seconds=older_than_s)
    names = list(
        AgentCommand.objects.filter(state=CommandState.PENDING, created_at__lt=since)
        .values_list("node__name", flat=True)
        .distinct()[:limit]
    )
    for name in names:
        notify_agent_on_commit(name)
    return len(names)


def do_mark_command_sent(command: AgentCommand) -> None:
    now = timezone.now()
    if command.state == CommandState.SENT:  # a re-send
        AgentCommand.objects.filter(pk=command.pk, state=CommandState.SENT).update(
            sent_at=now, attempts=F("attempts") + 1
        )
        return
    swap_state(
        AgentCommand,
        command.pk,
        COMMAND_MACHINE,
        command.state,
        CommandState.SENT,
        sent_at=now,
        attempts=F("attempts") + 1,
    )


def do_ack_command(command: AgentCommand, ok: bool, error: str = "") -> bool:
    """Record an agent's ack; idempotent (a duplicate ack of a finished command returns False)."""
    if COMMAND_MACHINE.is_terminal(command.state):
        return False
    new = CommandState.ACKED if ok else CommandState.FAILED
    swap_state(
        AgentCommand, command.pk, COMMAND_MACHINE, command.state, new, acked_at=timezone.now(), error=error
    )
    return True


def on_task_cancelled(sender: object, task: TrainingTask, node_ids: list[int], **_: object) -> None:
    """Receiver of :data:`controlplane.apps.training.signals.task_cancelled`: the nodes that held the task
    stop its workers (its snapshots go too)."""
    for node in Node.objects.filter(pk__in=node_ids):
        do_enqueue_command(
            node, CommandType.STOP_WORKERS, {"task": task.pk, "task_ended": True}, task.pk, task.epoch
        )


def do_fail_stale_commands(task_id: int, epoch: int, reason: str) -> int:
    """Commands of a task's older epochs that were never acknowledged will never be sent (again): the
    task moved on (fencing on the coordinator side, too)."""
    return (
        AgentCommand.objects.filter(task_id=task_id, task_epoch__lt=epoch)
        .filter(state__in=[CommandState.PENDING, CommandState.SENT])
        .update(state=CommandState.FAILED, error=reason, acked_at=timezone.now())
    )


def do_requeue_unacked_commands(node: Node) -> int:
    """On agent reconnect: every sent-but-unacked command goes back to pending to be re-sent."""
    return AgentCommand.objects.filter(node=node, state=CommandState.SENT).update(state=CommandState.PENDING)


# --- fault-injection drills (docs/ARCHITECTURE.md §8: operators inject faults) ------------------------------
# ``POST /api/v1/nodes/{id}/inject-fault/``: ``check_inject_fault`` validates the fault against the rows
# (the target task must be running on the node, the rank must be one of its ranks there) and
# ``do_inject_fault`` queues an ``inject_fault`` command in the node's outbox (the agent link sends it,
# re-sends it until acked, and the agent routes it to its worker) and writes an audit row. The command
# carries the task's current epoch, so a drill queued before a reconfiguration is refused by the agent
# afterwards (fencing).

FAULT_KINDS: tuple[str, ...] = get_args(FaultKind)
"""crash, exception, hang, straggler, network_error, node_loss (the agent's drill kinds)."""
NODE_FAULTS = frozenset({"node_loss"})
"""Faults aimed at the node itself (the agent dies with all its workers): no task, no rank."""
UNREACHABLE_NODE_STATES = frozenset({NodeState.LOST, NodeState.ISOLATED})
"""A drill queued for such a node would fire whenever it comes back: refused instead."""
DEFAULT_STRAGGLER_SLOWDOWN = 3.0


@dataclass(frozen=True)
class FaultDrill:
    kind: str
    task_id: int | None = None
    rank: int | None = None
    """None: every rank of the task on this node."""
    at_iteration: int | None = None
    slowdown: float | None = None
    message: str = ""


@dataclass(frozen=True)
class CheckedDrill:
    task: TrainingTask | None
    ranks: list[int]
    """The task's ranks on the node that the fault reaches."""
    spec: FaultSpec


def check_inject_fault(node: Node, drill: FaultDrill) -> CheckedDrill:
    """Field errors (400) for a fault the node cannot take; 409 for a node that cannot be reached."""
    errors: dict[str, list[str]] = {}
    if drill.kind not in FAULT_KINDS:
        raise InvalidInput({"fault": [f"Unknown fault {drill.kind!r}; one of: {', '.join(FAULT_KINDS)}."]})
    if node.state in UNREACHABLE_NODE_STATES:
        raise Conflict(f"Node {node.name} is {node.state}: a drill would wait for it to come back.")
    task: TrainingTask | None = None
    ranks: list[int] = []
    if drill.kind in NODE_FAULTS:
        if drill.task_id is not None:
            errors["task"] = ["node_loss takes the whole node down: give no task."]
        if drill.rank is not None:
            errors["rank"] = ["node_loss takes the whole node down: give no rank."]
    elif drill.task_id is None:
        errors["task"] = [f"A {drill.kind} drill needs the task to inject it into."]
    else:
        task = TrainingTask.objects.filter(pk=drill.task_id).first()
        if task is None:
            errors["task"] = [f"Task {drill.task_id} does not exist."]
        elif task.state != TaskState.RUNNING:
            errors["task"] = [f"Task {task.name} is {task.state}, not running."]
        else:
            local = sorted(
                Allocation.objects.filter(task=task, active=True, device__node=node).values_list(
                    "rank", flat=True
                )
            )
            if not local:
                errors["task"] = [f"Task {task.name} has no workers on {node.name}."]
            elif drill.rank is not None and drill.rank not in local:
                errors["rank"] = [
                    f"Rank {drill.rank} of {task.name} is not on {node.name} (its ranks there: "
                    f"{', '.join(map(str, local))})."
                ]
            else:
                ranks = [drill.rank] if drill.rank is not None else local
    if drill.slowdown is not None and drill.kind != "straggler":
        errors["slowdown"] = ["Only a straggler drill takes a slowdown."]
    if errors:
        raise InvalidInput(errors)
    slowdown = drill.slowdown or (DEFAULT_STRAGGLER_SLOWDOWN if drill.kind == "straggler" else 1.0)
    spec = FaultSpec(
        kind=drill.kind,  # checked against FAULT_KINDS above
        rank=drill.rank,
        at_iteration=drill.at_iteration,
        slowdown=slowdown,
        message=drill.message or f"{drill.kind} drill",
    )
    return CheckedDrill(task, ranks, spec)


@transaction.atomic
def do_inject_fault(actor: Actor, node: Node, drill: FaultDrill) -> AgentCommand:
    """Queue the drill in the node's outbox and audit it; the agent acks the command when it fires."""
    node = Node.objects.select_for_update(no_key=True).get(pk=node.pk)
    checked = check_inject_fault(node, drill)
    task = checked.task
    command = do_enqueue_command(
        node,
        CommandType.INJECT_FAULT,
        {"fault": checked.spec.model_dump(mode="json")},
        task_id=task.pk if task is not None else None,
        task_epoch=task.epoch if task is not None else None,
    )
    do_record_audit(
        actor,
        "inject_fault",
        node,
        after={
            "command_id": str(command.command_id),
            "fault": checked.spec.kind,
            "task": task.pk if task is not None else None,
            "ranks": checked.ranks,
            "at_iteration": checked.spec.at_iteration,
            "slowdown": checked.spec.slowdown,
        },
    )
    return command
