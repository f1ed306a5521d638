"""Planning queries, and the planner's view of the cluster built from the database.

:func:`build_cluster_state` / :func:`build_planning_problem` turn rows into the pure planner's input
(``controlplane.core.planning``), the same way every time, so equal cluster states give equal (hashable)
problems and a precomputed plan can be found by value:

- **Capacity**: devices in state ``healthy`` on nodes that are ``healthy``, not quarantined and not
  draining, of the cluster's planning device kind (the kind with most usable devices; a mixed cluster
  is planned over that kind only). One planning unit is one device (``unit_size = 1``); a task's
  ``allocation_unit`` restricts its own feasible counts.
- **Reserved devices**: healthy devices of that kind on a ``suspect`` node (not quarantined) that a task
  holds. A suspect node may be a short blip (a starved control plane, a mass silence held by the
  watchdog), so the task keeps them — a re-plan meanwhile must not shrink it — but they are not
  capacity: no other task is placed there until the node is healthy again. Once it is declared lost
  they are gone like any lost device.
- **Tasks**: every task that is pending, running, reconfiguring or suspended, in id order. ``workers``
  = its active allocations on usable or reserved devices, ``reserved`` = those on reserved ones;
  ``hit`` = it holds devices that are neither (a lost node, an isolated device) or it is named in
  ``hit_tasks`` (a failure struck it).
- **Throughput tables**: from the task's model spec on the device kind (CPU slots: ``cpu-slot``), with
  the efficiency factors last calibrated from its measured iteration times
  (``TrainingTask.throughput_table["efficiency"]``, written by the workload manager), up to
  ``min(max_workers, devices of the kind in the fleet)`` so the table does not change when capacity does.
- **D_running**: MTBF per node (``UNICRON_MTBF_NODE_S``) / registered, non-quarantined nodes, capped at
  ``UNICRON_D_RUNNING_CAP_S`` (§6.2). The fleet size, not the usable nodes, so a node loss leaves it
  unchanged and the precomputed plan for that loss matches the problem rebuilt after it.
- **D_transition**: :class:`~controlplane.core.planning.TransitionModel` with the task's model-state
  bytes and ``UNICRON_TRANSITION_RESTART_S`` / ``UNICRON_TRANSITION_ROLLBACK_S``.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, NamedTuple

from django.conf import settings
from django.db.models import Count, Prefetch, QuerySet

from controlplane.apps.fleet.choices import DeviceState, NodeState
from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.planning.measurements import list_iteration_times
from controlplane.apps.planning.models import Plan, Transition, TransitionStep
from controlplane.apps.training.choices import TaskState
from controlplane.apps.training.fit import ClusterKind, _device_kind
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.apps.training.selectors import get_task_spec
from controlplane.core.orchestration import DeviceSlot
from controlplane.core.planning import (
    DEVICE_KINDS,
    ClusterState,
    DeviceKind,
    Efficiency,
    GPTSpec,
    Measurement,
    MegatronConfig,
    PlanningProblem,
    ThroughputTable,
    TransitionModel,
    build_throughput_table,
    expected_running_duration_s,
    measured_slowdown,
    uncalibrated_prior,
)
from controlplane.core.planning import (
    TaskState as PlannerTask,
)

PLANNED_TASK_STATES = (
    TaskState.PENDING,
    TaskState.RUNNING,
    TaskState.RECONFIGURING,
    TaskState.SUSPENDED,
)
DEFAULT_DEVICE_KIND = "cpu-slot"
RECENT_ITERATION_SAMPLES = 20


def list_plans() -> QuerySet[Plan]:
    return Plan.objects.all()


def list_transitions() -> QuerySet[Transition]:
    steps = Prefetch("steps", queryset=TransitionStep.objects.order_by("order"))
    return Transition.objects.select_related("plan", "task").prefetch_related(steps)


def get_recent_iteration_s(task: TrainingTask, samples: int = RECENT_ITERATION_SAMPLES) -> float | None:
    """The median of the task's last ``samples`` measured iteration times (any epoch), or None."""
    recent = list_iteration_times(task.pk, samples)
    return statistics.median(recent) if recent else None


# --------------------------------------------------------------------------------------------------
# The planner's view of the cluster
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeldDevice:
    """A device in a task's active allocation."""

    slot: DeviceSlot
    rank: int
    usable: bool
    """On a usable device, or on a device reserved for it (a suspect node's)."""


@dataclass
class NodeView:
    """The nodes a transition's commands and state sources need: every node by name, and the usable ones
    (healthy, not quarantined, with a healthy device of the planning kind) in name order."""

    nodes_by_name: dict[str, Node]
    usable_nodes: list[str]


VIEW_NODE_FIELDS = ("id", "name", "address", "state", "quarantined", "snapshot_endpoint", "snapshots")
"""The columns of a node a decision reads (a fleet has thousands of nodes, and their timestamps and texts cost
more to load than these): the view's nodes are loaded with these only, a field left out is read on access."""


def _view_nodes() -> QuerySet[Node]:
    return Node.objects.only(*VIEW_NODE_FIELDS)


@dataclass
class ClusterView(NodeView):
    """Everything the workload manager reads from the database for one decision."""

    device_kind: str
    kind: DeviceKind
    usable: list[DeviceSlot]
    """Usable devices of the planning kind (the capacity every task may be placed on)."""
    tasks: list[TrainingTask]
    held: dict[int, list[HeldDevice]] = field(default_factory=dict)
    """task pk -> its active allocation (every device, usable or not), by rank."""
    fleet_devices: int = 0
    fleet_nodes: int = 0
    returning_nodes: tuple[str, ...] = ()
    units_per_node: int = 1
    reserved: frozenset[DeviceSlot] = frozenset()
    """Devices on suspect nodes held by a task: usable by that task only, never free."""
    prior: Efficiency = field(default_factory=Efficiency)
    """The efficiency a task never calibrated on this kind is planned with (:func:`calibration_prior`)."""

    def free(self) -> list[DeviceSlot]:
        taken = {h.slot for hs in self.held.values() for h in hs}
        return [d for d in self.usable if d not in taken]

    def current(self, task_pk: int) -> dict[DeviceSlot, int]:
        """The task's usable (or reserved) devices with their ranks."""
        return {h.slot: h.rank for h in self.held.get(task_pk, []) if h.usable}

    def releasable(self, slots: Iterable[DeviceSlot]) -> list[DeviceSlot]:
        """Of ``slots`` a task gives up, those another task may take (not a suspect node's)."""
        return [d for d in slots if d not in self.reserved]


def _planning_kind(usable: Mapping[str, int], every: Mapping[str, int]) -> str:
    """The kind with most usable devices (by name on a tie); with none usable, the kind with most devices."""
    counts = usable or every
    return max(sorted(counts), key=counts.__getitem__) if counts else DEFAULT_DEVICE_KIND


def _devices_per_kind(devices: QuerySet[Device]) -> dict[str, int]:
    return dict(devices.order_by().values_list("kind").annotate(n=Count("pk")).values_list("kind", "n"))


def _usable_devices() -> QuerySet[Device]:
    return Device.objects.filter(
        state=DeviceState.HEALTHY, node__state=NodeState.HEALTHY, node__quarantined=False
    )


def load_task_view(task: TrainingTask) -> tuple[NodeView, list[HeldDevice]]:
    """The nodes and ``task``'s active allocation by rank, each device usable (or reserved for it) exactly as
    :func:`load_cluster` judges it, without reading the fleet's devices: what an in-place recovery needs,
    since the task keeps its devices."""
    usable_per_kind = _devices_per_kind(_usable_devices())
    # every device is counted only when none is usable (the kind is then the most numerous)
    every = {} if usable_per_kind else _devices_per_kind(Device.objects.all())
    kind = _planning_kind(usable_per_kind, every)
    nodes = list(_view_nodes())
    usable = set(_usable_devices().filter(kind=kind).order_by().values_list("node_id", flat=True).distinct())
    view = NodeView(
        nodes_by_name={n.name: n for n in nodes},
        usable_nodes=sorted(n.name for n in nodes if n.pk in usable),
    )
    held = []
    for a in (
        Allocation.objects.filter(task=task, active=True).select_related("device__node").order_by("rank")
    ):
        device, node = a.device, a.device.node
        ok = (
            device.kind == kind
            and device.state == DeviceState.HEALTHY
            and not node.quarantined
            and node.state in (NodeState.HEALTHY, NodeState.SUSPECT)
        )
        held.append(HeldDevice(DeviceSlot(node.name, device.index, device.pk), a.rank, ok))
    return view, held


class _DeviceRow(NamedTuple):
    """The columns of a device the planner's view needs (a fleet has thousands: no model instances)."""

    pk: int
    node_id: int
    index: int  # type: ignore[assignment]  # the field replaces tuple.index
    kind: str
    state: str
    memory_bytes: int


def load_cluster() -> ClusterView:
    """Read nodes, devices, planned tasks and their active allocations (a handful of queries; devices and
    allocations as plain rows, which at fleet size costs a fraction of building model instances)."""
    nodes = {n.pk: n for n in _view_nodes()}
    devices = list(
        map(
            _DeviceRow._make,
            Device.objects.order_by().values_list("pk", "node_id", "index", "kind", "state", "memory_bytes"),
        )
    )
    up = {pk for pk, n in nodes.items() if n.state == NodeState.HEALTHY and not n.quarantined}
    suspect = {pk for pk, n in nodes.items() if n.state == NodeState.SUSPECT and not n.quarantined}
    rows = [(d.kind, d.node_id in up and d.state == DeviceState.HEALTHY) for d in devices]
    kind_name = _planning_kind(Counter(k for k, ok in rows if ok), Counter(k for k, _ in rows))
    of_kind = [d for d in devices if d.kind == kind_name]
    memory = min((d.memory_bytes for d in of_kind), default=0)
    per_node = Counter(d.node_id for d in of_kind)
    known = DEVICE_KINDS.get(kind_name)
    if known is not None:
        # a TP group never straddles nodes: the nodes we have bound it, not the kind's nominal node size
        kind = replace(known, devices_per_node=min(known.devices_per_node, max(per_node.values(), default=1)))
    else:
        kind = _device_kind(
            ClusterKind(kind_name, len(of_kind), memory or 1, max(per_node.values(), default=1))
        )
    name = {pk: n.name for pk, n in nodes.items()}
    slot = {d.pk: DeviceSlot(name[d.node_id], d.index, d.pk) for d in devices}
    usable = sorted(
        slot[d.pk] for d, (_, ok) in zip(devices, rows, strict=True) if ok and d.kind == kind_name
    )
    usable_ids = {s.device_id for s in usable}
    usable_nodes = sorted({s.node for s in usable})
    tasks = list(TrainingTask.objects.filter(state__in=PLANNED_TASK_STATES).order_by("pk"))
    on_suspect = {d.pk for d in of_kind if d.node_id in suspect and d.state == DeviceState.HEALTHY}
    held: dict[int, list[HeldDevice]] = {}
    reserved: set[DeviceSlot] = set()
    active = Allocation.objects.filter(active=True, task__in=[t.pk for t in tasks])
    for task_id, device_id, rank in active.order_by("task_id", "rank").values_list(
        "task_id", "device_id", "rank"
    ):
        if device_id in on_suspect:
            reserved.add(slot[device_id])
        ok = device_id in usable_ids or device_id in on_suspect
        held.setdefault(task_id, []).append(HeldDevice(slot[device_id], rank, ok))
    usable_per_node = Counter(s.node for s in usable)
    units = Counter(usable_per_node.values()).most_common(1)
    returning = tuple(
        sorted(
            n.name
            for n in nodes.values()
            if not n.quarantined and n.state in (NodeState.LOST, NodeState.ISOLATED, NodeState.JOINING)
        )
    )
    return ClusterView(
        device_kind=kind_name,
        kind=kind,
        usable=usable,
        usable_nodes=usable_nodes,
        nodes_by_name={n.name: n for n in nodes.values()},
        tasks=tasks,
        held=held,
        fleet_devices=len(of_kind),
        fleet_nodes=sum(1 for n in nodes.values() if not n.quarantined),
        returning_nodes=returning,
        units_per_node=units[0][0] if units else 1,
        reserved=frozenset(reserved),
        prior=calibration_prior(tasks, kind_name, kind),
    )


def task_spec(task: TrainingTask) -> GPTSpec:
    return get_task_spec(task)


def stored_efficiency(task: TrainingTask, device_kind: str, prior: Efficiency | None = None) -> Efficiency:
    """The efficiency factors last calibrated for ``task`` on ``device_kind``; ``prior`` (the model's
    defaults when not given) for a task never calibrated there."""
    prior = prior or Efficiency()
    data: Any = task.throughput_table or {}
    eff = data.get("efficiency") if isinstance(data, dict) else None
    if not isinstance(eff, dict) or data.get("device_kind") != device_kind:
        return prior
    try:
        return Efficiency(float(eff["compute"]), float(eff["communication"]), float(eff["overhead_s"]))
    except (KeyError, TypeError, ValueError):
        return prior


def stored_measurements(task: TrainingTask, device_kind: str) -> list[Measurement]:
    """The measured iteration times ``task``'s calibration on ``device_kind`` was fitted to (none when it
    was never calibrated there)."""
    data: Any = task.throughput_table or {}
    if not isinstance(data, dict) or data.get("device_kind") != device_kind or "efficiency" not in data:
        return []
    out = []
    for m in data.get("measurements") or []:
        try:
            c = m["config"]
            cfg = MegatronConfig(
                int(c["tp"]),
                int(c["pp"]),
                int(c["dp"]),
                int(c["micro_batch"]),
                int(c["num_micro_batches"]),
                bool(c["recompute"]),
            )
            out.append(Measurement(cfg, float(m["iteration_s"])))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def calibration_prior(tasks: Iterable[TrainingTask], device_kind: str, kind: DeviceKind) -> Efficiency:
    """The efficiency an uncalibrated task is planned with: the model's defaults slowed down by the median
    measured / modelled ratio of the tasks calibrated on ``device_kind``
    (:func:`~controlplane.core.planning.uncalibrated_prior`), so one plan compares every task on one basis."""
    slowdowns = []
    for task in tasks:
        s = measured_slowdown(task_spec(task), kind, stored_measurements(task, device_kind))
        if s is not None:
            slowdowns.append(s)
    return uncalibrated_prior(slowdowns)


@lru_cache(maxsize=256)
def _table(spec: GPTSpec, kind: DeviceKind, max_workers: int, unit: int, eff: Efficiency) -> ThroughputTable:
    return build_throughput_table(spec, kind, max_workers, eff, unit=unit)


def task_table(task: TrainingTask, view: ClusterView, eff: Efficiency | None = None) -> ThroughputTable:
    """T(t, x) of ``task`` on the cluster's planning kind (cached: equal inputs give the same object)."""
    bound = max(min(task.max_workers, view.fleet_devices), 0)
    eff = eff if eff is not None else stored_efficiency(task, view.device_kind, view.prior)
    return _table(task_spec(task), view.kind, bound, task.allocation_unit, eff)


def transition_model(task: TrainingTask) -> TransitionModel:
    return TransitionModel(
        state_bytes=task_spec(task).model_state_bytes(),
        restart_s=float(settings.UNICRON_TRANSITION_RESTART_S),
        rollback_s=float(settings.UNICRON_TRANSITION_ROLLBACK_S),
    )


def d_running_s(view: ClusterView) -> float:
    return expected_running_duration_s(
        float(settings.UNICRON_MTBF_NODE_S),
        view.fleet_nodes,
        cap_s=float(settings.UNICRON_D_RUNNING_CAP_S),
    )


def planner_task(task: TrainingTask, view: ClusterView, hit: bool = False) -> PlannerTask:
    held = view.held.get(task.pk, [])
    workers = sum(1 for h in held if h.usable)
    return PlannerTask(
        task_id=str(task.pk),
        weight=float(task.weight),
        table=task_table(task, view),
        workers=workers,
        hit=hit or any(not h.usable for h in held),
        min_workers=task.min_workers,
        max_workers=task.max_workers,
        transition=transition_model(task),
        reserved=sum(1 for h in held if h.usable and h.slot in view.reserved),
    )


def cluster_state_of(view: ClusterView, hit_tasks: Iterable[int] = ()) -> ClusterState:
    hits = set(hit_tasks)
    problem = PlanningProblem(
        tasks=tuple(planner_task(t, view, t.pk in hits) for t in view.tasks),
        capacity_units=len(view.usable),
        d_running_s=d_running_s(view),
        unit_size=1,
    )
    placement: dict[str, dict[str, int]] = {n: {} for n in view.usable_nodes}
    for task_pk, held in view.held.items():
        for h in held:
            if h.usable:
                per = placement.setdefault(h.slot.node, {})
                per[str(task_pk)] = per.get(str(task_pk), 0) + 1
    suspect = tuple(sorted({d.node for d in view.reserved} & set(placement)))
    return ClusterState(problem, placement, view.returning_nodes, view.units_per_node, suspect)


def build_cluster_state(hit_tasks: Iterable[int] = ()) -> ClusterState:
    """The current :class:`~controlplane.core.planning.ClusterState` (problem + placement)."""
    return cluster_state_of(load_cluster(), hit_tasks)


def build_planning_problem(hit_tasks: Iterable[int] = (), *, healthy: bool = False) -> PlanningProblem:
    """The current :class:`~controlplane.core.planning.PlanningProblem`.

    ``healthy=True``: the same tasks on a fully healthy cluster (every registered device of the planning
    kind usable, nothing hit, no task holding workers) — its optimum is the healthy-cluster WAF the
    dashboard compares against.
    """
    problem = build_cluster_state(hit_tasks).problem
    if not healthy:
        return problem
    per_kind = _devices_per_kind(Device.objects.filter(node__quarantined=False))
    kind = _planning_kind(per_kind, per_kind)
    total = per_kind.get(kind, 0)
    tasks = tuple(replace(t, workers=0, reserved=0, hit=False) for t in problem.tasks)
    return replace(problem, tasks=tasks, capacity_units=total)
