"""Fleet queries."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, QuerySet

from controlplane.apps.fleet.choices import CommandState
from controlplane.apps.fleet.models import AgentCommand, Device, Node
from controlplane.apps.fleet.tokens import hash_node_token, token_matches
from controlplane.apps.training.models import Allocation, TrainingTask


def verify_node_token(node_name: str, token: str) -> Node | None:
    """The node ``node_name`` if ``token`` is its agent token, else None (constant-time hash compare)."""
    node = Node.objects.filter(name=node_name).first()
    if node is None or not node.token_hash:
        # compare anyway so a missing node costs the same as a wrong token
        token_matches(token, "0" * 64)
        return None
    return node if token_matches(token, node.token_hash) else None


def get_node_for_token(token: str) -> Node | None:
    """The node whose agent token is ``token`` (looked up by its SHA-256: the agent link knows only the
    token when the socket opens). A rotated token no longer matches any node."""
    if not token:
        return None
    return Node.objects.filter(token_hash=hash_node_token(token)).first()


def list_nodes() -> QuerySet[Node]:
    """Nodes with ``device_count`` annotated (one query for a page, not one per node), by name: a grouped
    query drops the model's default order, and pages of an unordered list repeat or skip nodes."""
    return Node.objects.annotate(device_count=Count("devices")).order_by("name")


def list_devices() -> QuerySet[Device]:
    return Device.objects.select_related("node")


def list_device_inventory() -> list[tuple[str, int, int]]:
    """Every device as ``(kind, memory_bytes, node_id)``: what the fit check of a submitted task needs
    (registered with :mod:`controlplane.apps.training.fit`)."""
    return list(Device.objects.values_list("kind", "memory_bytes", "node_id"))


def list_pending_commands(node: Node) -> QuerySet[AgentCommand]:
    return AgentCommand.objects.filter(node=node, state=CommandState.PENDING).order_by("created_at", "id")


@dataclass(frozen=True)
class DeviceMap:
    """The whole fleet in a few compact rows, for the dashboard's nodes x devices map: ``nodes`` are
    ``(id, name, state, quarantined)``; ``devices`` ``(id, node id, index, kind, state, task id, rank)``,
    task and rank ``None`` when idle; ``tasks`` ``(id, name, state)`` of the tasks holding devices;
    ``task_states`` counts every task by state."""

    nodes: list[tuple[int, str, str, bool]]
    devices: list[tuple[int, int, int, str, str, int | None, int | None]]
    tasks: list[tuple[int, str, str]]
    task_states: dict[str, int]


def get_device_map() -> DeviceMap:
    """Four queries whatever the fleet size (16,384 devices is about 0.5 MB of JSON): no per-node or
    per-device query, no page limit."""
    active = Allocation.objects.filter(active=True)
    held = {device: (task, rank) for device, task, rank in active.values_list("device_id", "task_id", "rank")}
    devices = [
        (pk, node, index, kind, state, *held.get(pk, (None, None)))
        for pk, node, index, kind, state in Device.objects.order_by("node_id", "index").values_list(
            "id", "node_id", "index", "kind", "state"
        )
    ]
    task_ids = {task for task, _ in held.values()}
    states = TrainingTask.objects.values("state").annotate(n=Count("id")).order_by("state")
    return DeviceMap(
        nodes=list(Node.objects.order_by("name").values_list("id", "name", "state", "quarantined")),
        devices=devices,
        tasks=list(
            TrainingTask.objects.filter(pk__in=task_ids).order_by("id").values_list("id", "name", "state")
        ),
        task_states={r["state"]: int(r["n"]) for r in states},
    )
