"""Can a task spec ever run on this cluster? (docs/ARCHITECTURE.md §7.3 feasibility, §12 "a spec that can
never fit").

A thin adapter over the pure throughput model in ``controlplane.core.planning``: for each device kind
present in the cluster, ``x_min`` is the smallest worker count ``x`` (a multiple of the allocation
unit, ``min_workers <= x <= max_workers``) with a valid parallel factorisation whose memory fits the
device; the task can run if some kind has ``x_min`` no larger than the devices of that kind.
Device kinds the registry does not know are modelled from the registered memory of their devices.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from django.core.exceptions import ImproperlyConfigured

from controlplane.core.planning import DEVICE_KINDS, DeviceKind, GPTSpec, enumerate_configs

FieldErrors = dict[str, list[str]]


@dataclass(frozen=True)
class ClusterKind:
    """What the fit check needs to know about one device kind in the cluster."""

    name: str
    count: int
    memory_bytes: int
    devices_per_node: int


@dataclass(frozen=True)
class TaskShape:
    spec: GPTSpec
    min_workers: int
    max_workers: int
    allocation_unit: int


def _device_kind(kind: ClusterKind) -> DeviceKind:
    known = DEVICE_KINDS.get(kind.name)
    if known is not None:
        return replace(known, memory_bytes=float(kind.memory_bytes))
    # unknown kind: only memory and TP-within-a-node matter for feasibility; the rest is nominal
    return DeviceKind(kind.name, 1.0, float(kind.memory_bytes), max(kind.devices_per_node, 1), 1.0, 1.0)


SEARCH_LIMIT = 4096
"""x_min is searched up to max(devices of the kind, SEARCH_LIMIT) workers: bounded work per submission
(a spec that fits nowhere costs ~0.1 s); beyond the cluster's size the exact x_min only improves the
error message."""


def x_min(shape: TaskShape, kind: ClusterKind, limit: int | None = None) -> int | None:
    """The smallest feasible worker count on ``kind`` within the task's bounds (and ``limit``), or None."""
    device_kind = _device_kind(kind)
    unit = shape.allocation_unit
    start = max(unit, -(-shape.min_workers // unit) * unit)
    stop = shape.max_workers if limit is None else min(shape.max_workers, limit)
    for workers in range(start, stop + 1, unit):
        if next(enumerate_configs(shape.spec, device_kind, workers), None) is not None:
            return workers
    return None


def fit_errors(shape: TaskShape, kinds: list[ClusterKind]) -> FieldErrors:
    """Field errors saying why the task can never run on ``kinds`` (empty when it can)."""
    total = sum(k.count for k in kinds)
    if shape.min_workers > total:
        return {"min_workers": [f"Needs at least {shape.min_workers} devices; the cluster has {total}."]}
    best: tuple[int, ClusterKind] | None = None
    searched = 0
    for kind in kinds:
        limit = max(kind.count, SEARCH_LIMIT)
        searched = max(searched, min(shape.max_workers, limit))
        xm = x_min(shape, kind, limit)
        if xm is not None and xm <= kind.count:
            return {}
        if xm is not None and (best is None or xm < best[0]):
            best = (xm, kind)
    if best is not None:
        xm, kind = best
        return {
            "min_workers": [
                f"The model needs at least {xm} devices of kind {kind.name}; the cluster has {kind.count}."
            ]
        }
    return {
        "max_workers": [
            f"The model does not fit device memory with any parallel configuration of at most "
            f"{searched} workers on the cluster's devices."
        ]
    }


DeviceInventory = Callable[[], list[tuple[str, int, int]]]
"""The cluster's devices as ``(kind, memory_bytes, node_id)`` rows."""

_inventory: DeviceInventory | None = None


def register_device_inventory(reader: DeviceInventory) -> None:
    """Install the reader of the cluster's devices: the fleet app's, at start-up (the fleet app reads tasks
    and allocations, so training never imports it)."""
    global _inventory
    _inventory = reader


def list_cluster_kinds() -> list[ClusterKind]:
    """The device kinds of the cluster now (every registered device, whatever its state)."""
    if _inventory is None:
        raise ImproperlyConfigured(
            "no reader of the cluster's devices is registered (the fleet app registers it)"
        )
    return summarize_kinds(_inventory())


def summarize_kinds(devices: list[tuple[str, int, int]]) -> list[ClusterKind]:
    """Group ``(kind, memory_bytes, node_id)`` rows by kind (the smallest memory of a kind counts)."""
    counts: Counter[str] = Counter()
    memory: dict[str, int] = {}
    per_node: Counter[tuple[str, int]] = Counter()
    for kind, mem, node in devices:
        counts[kind] += 1
        memory[kind] = min(mem, memory.get(kind, mem))
        per_node[(kind, node)] += 1
    return [
        ClusterKind(
            name=kind,
            count=counts[kind],
            memory_bytes=memory[kind],
            devices_per_node=max(n for (k, _), n in per_node.items() if k == kind),
        )
        for kind in sorted(counts)
    ]
