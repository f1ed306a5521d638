"""Fault-injection drills (DESIGN §12: operators inject faults): the one write path for
``POST /api/v1/nodes/{id}/inject-fault/``.

``check_inject_fault`` validates the fault against the rows (the target task must be running on the
node, the rank must be one of its ranks there) and ``do_inject_fault`` queues an ``inject_fault``
command in the node's outbox (the agent link sends it, re-sends it until acked, and the agent routes
it to its worker) and writes an audit row. The command carries the task's current epoch, so a drill
queued before a reconfiguration is refused by the agent afterwards (fencing).

It lives next to the API because the fleet services module belongs to the coordinator's loop; it
only calls the fleet outbox and audit services.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from django.db import transaction

from controlplane.apps.accounts.services import Actor, do_record_audit
from controlplane.apps.common.errors import Conflict, InvalidInput
from controlplane.apps.fleet.choices import CommandType, NodeState
from controlplane.apps.fleet.models import AgentCommand, Node
from controlplane.apps.fleet.services import do_enqueue_command
from controlplane.apps.training.choices import TaskState
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.core.protocol import FaultKind, FaultSpec

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
    node = Node.objects.select_for_update().get(pk=node.pk)
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
