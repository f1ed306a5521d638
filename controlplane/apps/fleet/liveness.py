"""A node's liveness as its agent link reports it: the hello (inventory, state, what must be re-sent or
stopped), heartbeats that bring a node back, a closed link, frames sent in another node's name.

Each function is one short transaction, called by the agent-link consumer
(:mod:`controlplane.live.agent_link`) through ``database_sync_to_async``.
"""

from __future__ import annotations

import logging
import re

from django.db import transaction
from django.utils import timezone

from controlplane.apps.accounts.services import do_record_audit
from controlplane.apps.common.triggers import request_replan
from controlplane.apps.fleet.authority import Refusal, check_snapshot_adverts
from controlplane.apps.fleet.choices import DEVICE_MACHINE, CommandState, CommandType, DeviceState, NodeState
from controlplane.apps.fleet.models import AgentCommand, Device, Node
from controlplane.apps.fleet.services import (
    do_enqueue_command,
    do_record_snapshots,
    do_requeue_unacked_commands,
    do_set_device_state,
    do_set_node_state,
)
from controlplane.apps.fleet.signals import agent_said_hello
from controlplane.apps.training.choices import TERMINAL_TASK_STATES, TaskState
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.apps.training.selectors import task_pk
from controlplane.core.planning import DEVICE_KINDS
from controlplane.core.protocol import DeviceInfo, Hello, WorkerStatus

log = logging.getLogger(__name__)


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
    node = Node.objects.select_for_update(no_key=True).get(pk=node_id)
    existing = {d.index: d for d in Device.objects.filter(node=node)}
    reported = set()
    new: list[Device] = []
    for info in hello.devices:
        reported.add(info.index)
        kind = device_kind_key(info)
        memory = _device_memory(info, kind)
        device = existing.get(info.index)
        if device is None:
            new.append(Device(node=node, index=info.index, kind=kind, memory_bytes=memory))
        elif (device.kind, device.memory_bytes) != (kind, memory):
            Device.objects.filter(pk=device.pk).update(kind=kind, memory_bytes=memory)
    Device.objects.bulk_create(new)  # a new node's whole inventory in one statement
    for index, device in existing.items():  # gone from the inventory: the device failed
        if index not in reported and DEVICE_MACHINE.can(device.state, DeviceState.FAILED):
            do_set_device_state(device, DeviceState.FAILED)
    # one UPDATE: what the agent says of itself, and its snapshot list emptied before its advert is
    # checked (the check must not count what this node listed before it restarted)
    Node.objects.filter(pk=node.pk).update(
        agent_version=hello.agent_version,
        last_heartbeat_at=timezone.now(),
        address=node.address or hello.hostname[:255],
        snapshots=[],
        snapshot_endpoint=hello.snapshot_endpoint or "",
    )
    allowed, refused = check_snapshot_adverts(node.pk, hello.snapshots)
    if allowed:
        do_record_snapshots(node.pk, [s.model_dump(mode="json") for s in allowed])
    node = _bring_back(node, "agent said hello", warming=hello.warming)
    do_requeue_unacked_commands(node)
    agent_said_hello.send(sender=Node, node=node, hello=hello)  # incidents: ranks the agent lost
    _stop_stray_workers(node, hello.workers)
    return node.state, refused


_LIVE_WORKER_STATES = ("init", "healthy", "unhealthy")


def _stop_stray_workers(node: Node, workers: list[WorkerStatus]) -> None:
    """Workers the agent lists (at hello, or in the heartbeat that brings a silent node back) for a task
    that no longer runs on this node (it moved while the node was cut off or frozen, or it ended) are
    stopped: left alone they would train a second copy of the task and write its checkpoints. A task
    still allocated here is left to its transitions."""
    listed = {w.task_id for w in workers if w.state in _LIVE_WORKER_STATES}
    for task_id in sorted(listed):
        pk = task_pk(task_id)
        task = TrainingTask.objects.filter(pk=pk).first() if pk is not None else None
        if task is None:
            continue  # not ours to name in a command (no task row, no epoch)
        if (
            task.state not in TERMINAL_TASK_STATES
            and task.allocations.filter(active=True, device__node=node).exists()
        ):
            continue
        if _stopping(node.pk, task.pk):
            continue
        log.warning("node %s still runs task %s, which no longer runs there: stopping it", node.name, task.pk)
        _stop_workers(node, task)


def _stopping(node_id: int, task_id: int) -> bool:
    """A stop of the task's workers on the node is already on its way (pending or sent)."""
    return AgentCommand.objects.filter(
        node_id=node_id,
        task_id=task_id,
        type=CommandType.STOP_WORKERS,
        state__in=[CommandState.PENDING, CommandState.SENT],
    ).exists()


def _stop_workers(node: Node, task: TrainingTask, ranks: list[int] | None = None) -> None:
    """Tell the node to stop the task's workers (``ranks``; None: all); an ended task's snapshots on the
    node go too."""
    payload: dict[str, object] = {
        "task": task.pk,
        "grace_s": 5.0,
        "task_ended": task.state in TERMINAL_TASK_STATES,
    }
    if ranks is not None:
        payload["ranks"] = ranks
    do_enqueue_command(node, CommandType.STOP_WORKERS, payload, task.pk, task.epoch)


StrayWorker = tuple[str, int, int, int | None]
"""A worker as a node lists it: (task id, epoch, rank, pid)."""


@transaction.atomic
def reconcile_workers(
    node_id: int, workers: list[WorkerStatus], suspected: frozenset[StrayWorker]
) -> frozenset[StrayWorker]:
    """Level-triggered: what a healthy node runs is compared with what it was given. A live worker no
    active allocation accounts for — its task no longer runs here or ended, or its task is running (no
    transition open) and the worker is not that epoch's rank on that device — is a stray; a stray listed
    in two readings in a row (``suspected``: the strays of the previous reading) is stopped, so a
    transition that is just being delivered is never cut short. The hello and the revival stop a moved
    task's workers at once (:func:`_stop_stray_workers`); this catches whatever a lost command, a
    restarted agent or a re-delivered order left running. Returns this reading's strays."""
    node = Node.objects.filter(pk=node_id).first()
    if node is None or node.state != NodeState.HEALTHY:
        return frozenset()
    live = [w for w in workers if w.state in _LIVE_WORKER_STATES and task_pk(w.task_id) is not None]
    tasks = TrainingTask.objects.in_bulk({task_pk(w.task_id) for w in live})
    held = set(
        Allocation.objects.filter(active=True, device__node_id=node_id, task_id__in=list(tasks)).values_list(
            "task_id", "epoch", "rank", "device__index"
        )
    )
    tasks_here = {task_id for task_id, _, _, _ in held}
    strays: dict[int, list[WorkerStatus]] = {}
    for w in live:
        task = tasks.get(task_pk(w.task_id))
        if task is None:
            continue  # not ours to name in a command
        gone = task.state in TERMINAL_TASK_STATES or task.pk not in tasks_here
        stale = task.state == TaskState.RUNNING and (task.pk, w.epoch, w.rank, w.device) not in held
        if gone or stale:
            strays.setdefault(task.pk, []).append(w)
    found = {_stray_key(w) for ws in strays.values() for w in ws}
    for pk, ws in sorted(strays.items()):
        confirmed = [w for w in ws if _stray_key(w) in suspected]
        if not confirmed or _stopping(node_id, pk):
            continue
        task = tasks[pk]
        whole = task.state in TERMINAL_TASK_STATES or pk not in tasks_here
        ranks = None if whole else sorted({w.rank for w in confirmed})
        log.warning(
            "node %s runs %s of task %s that no allocation accounts for (task %s, epoch %s): stopping",
            node.name,
            "every worker" if whole else f"ranks {ranks}",
            pk,
            task.state,
            task.epoch,
        )
        _stop_workers(node, task, ranks)
    return frozenset(found)


def _stray_key(w: WorkerStatus) -> StrayWorker:
    return (w.task_id, w.epoch, w.rank, w.pid)


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
def revive_node(node_id: int, warming: bool = False, workers: list[WorkerStatus] | None = None) -> str:
    """A heartbeat arrived from a node that is not healthy (the watchdog thought it silent, or it is
    joining and its agent just became warm). The workers it lists for tasks that moved away meanwhile
    are stopped, as at hello."""
    node = Node.objects.select_for_update(no_key=True).get(pk=node_id)
    node = _bring_back(
        node, "agent warm" if node.state == NodeState.JOINING else "heartbeat resumed", warming
    )
    _stop_stray_workers(node, workers or [])
    return node.state


@transaction.atomic
def mark_link_closed(node_id: int, code: int | None) -> str | None:
    """Socket closed: a healthy node becomes suspect at once (docs/ARCHITECTURE.md §7.1 socket state)."""
    node = Node.objects.select_for_update(no_key=True).filter(pk=node_id).first()
    if node is None:
        return None
    if node.state == NodeState.HEALTHY:
        node = do_set_node_state(node, NodeState.SUSPECT, f"agent link closed (code {code})")
    return node.state


@transaction.atomic
def record_impersonation(node_id: int, claimed: str, seq: int) -> None:
    node = Node.objects.get(pk=node_id)
    do_record_audit(None, "agent_impersonation_refused", node, after={"claimed_node": claimed, "seq": seq})
