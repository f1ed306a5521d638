"""The healthy-cluster optimum: the planner's best cluster WAF if every registered, non-quarantined node
were healthy (the reference line of the overview's WAF chart, DESIGN §6.1).

Loads rows, builds a :class:`~controlplane.core.planning.PlanningProblem` and asks the core planner.
Modelling choices (this is the dashboard's reference, not the plan the coordinator acts on):

- **Tasks**: every task that is not finished (pending, running, reconfiguring, suspended): the
  optimum runs queued tasks too, so a queue that could run shows up as a gap.
- **Capacity**: every device of every non-quarantined node, whatever its current state (a lost or
  suspect node counts as if it were healthy; an operator's quarantine is a decision, not a failure).
- **No transition cost**: every task is planned from zero workers and not hit, so
  ``G = F·D_running`` and the DP maximises Σ F: the best steady state, not the best next move.
- **One device kind**: the cluster's most common kind (by device count) models every device; the
  planner takes one throughput table per task.
- **Calibration with measurements**: where a running task has achieved-FLOP/s samples at its current
  worker count (since its newest allocation, within :data:`CALIBRATION_WINDOW_S`), its modelled table is
  scaled by measured ÷ modelled at that count, so the optimum and the achieved series are in the same
  units as the workers' real speed (a CPU slot runs far below its nominal peak). The model's shape
  across worker counts is kept.
- The result is memoised on its inputs: it changes only when tasks, weights, nodes or calibration
  change, and the beat task asks every few seconds.

When the coordinator's own ``planning.selectors.build_planning_problem`` is available it should replace
:func:`build_healthy_problem`'s task tables (the coordinator's calibration is the one the plans use).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import lru_cache

from django.db.models import Max
from django.utils import timezone

from controlplane.apps.fleet.models import Device
from controlplane.apps.metrics.choices import MetricKind
from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.training.choices import TERMINAL_TASK_STATES, TaskState
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.core.planning import (
    DEVICE_KINDS,
    DeviceKind,
    GPTSpec,
    PlanningProblem,
    ThroughputPoint,
    ThroughputTable,
    build_throughput_table,
    plan,
)
from controlplane.core.planning import (
    TaskState as PlannerTask,
)

CALIBRATION_WINDOW_S = 600.0
"""Measured achieved FLOP/s older than this do not calibrate the optimum."""
D_RUNNING_S = 3600.0
"""Any positive horizon: with no transition cost it only scales the objective."""


@dataclass(frozen=True)
class TaskInput:
    """What the optimum needs to know about one task (hashable: the memo key)."""

    task_id: int
    weight: float
    spec: GPTSpec
    min_workers: int
    max_workers: int
    allocation_unit: int
    measured: tuple[int, float] | None
    """(workers, measured achieved FLOP/s) at the task's current allocation, when known."""


def _device_kind(name: str, memory_bytes: int, per_node: int) -> DeviceKind:
    known = DEVICE_KINDS.get(name)
    if known is not None:
        return replace(known, memory_bytes=float(memory_bytes))
    # a kind the registry does not know: memory and TP-within-a-node from the rows, the rest as a CPU slot
    slot = DEVICE_KINDS["cpu-slot"]
    return replace(slot, name=name, memory_bytes=float(memory_bytes), devices_per_node=max(per_node, 1))


def _measured(task: TrainingTask, now: datetime) -> tuple[int, float] | None:
    """Median achieved FLOP/s since the task's newest active allocation (its current worker count)."""
    allocs = Allocation.objects.filter(task=task, active=True)
    workers = allocs.count()
    if not workers or task.state != TaskState.RUNNING:
        return None
    since = max(
        allocs.aggregate(newest=Max("created_at"))["newest"] or now,
        now - timedelta(seconds=CALIBRATION_WINDOW_S),
    )
    values = sorted(
        MetricSample.objects.filter(
            task=task, kind=MetricKind.ACHIEVED_FLOPS, at__gt=since, at__lte=now
        ).values_list("value", flat=True)
    )
    if not values or values[len(values) // 2] <= 0:
        return None
    # 3 significant digits: the memo key stays the same while the speed only jitters
    return workers, float(f"{values[len(values) // 2]:.3g}")


def _table(t: TaskInput, kind: DeviceKind, capacity: int) -> ThroughputTable:
    table = build_throughput_table(t.spec, kind, min(t.max_workers, capacity), unit=t.allocation_unit)
    if t.measured is None:
        return table
    workers, flops = t.measured
    modelled = table.throughput(workers)
    if modelled <= 0:
        return table
    scale = flops / modelled
    return ThroughputTable(
        tuple(
            ThroughputPoint(p.workers, p.flops_per_s * scale, p.config, p.iteration_s) for p in table.points
        )
    )


@lru_cache(maxsize=64)
def healthy_optimum(tasks: tuple[TaskInput, ...], kind: DeviceKind, capacity: int) -> float:
    """Σ F of the DP's plan for ``tasks`` on ``capacity`` devices of ``kind`` (pure; memoised)."""
    if not tasks or capacity <= 0:
        return 0.0
    problem = PlanningProblem(
        tasks=tuple(
            PlannerTask(
                task_id=str(t.task_id),
                weight=t.weight,
                table=_table(t, kind, capacity),
                min_workers=t.min_workers,
                max_workers=t.max_workers,
            )
            for t in tasks
        ),
        capacity_units=capacity,
        d_running_s=D_RUNNING_S,
        unit_size=1,
    )
    return plan(problem).expected_waf


def load_inputs(now: datetime | None = None) -> tuple[tuple[TaskInput, ...], DeviceKind | None, int]:
    """Tasks, the modelled device kind and the capacity, read from the database."""
    now = now or timezone.now()
    rows = list(Device.objects.filter(node__quarantined=False).values_list("kind", "memory_bytes", "node_id"))
    if not rows:
        return (), None, 0
    counts = Counter(k for k, _, _ in rows)
    name = counts.most_common(1)[0][0]
    per_node = Counter(n for k, _, n in rows if k == name)
    memory = min(m for k, m, _ in rows if k == name)
    kind = _device_kind(name, memory, max(per_node.values()))
    tasks = []
    for task in TrainingTask.objects.exclude(state__in=TERMINAL_TASK_STATES).order_by("pk"):
        try:
            spec = GPTSpec(
                task.num_layers,
                task.hidden_size,
                task.num_attention_heads,
                task.seq_length,
                task.vocab_size,
                task.global_batch_size,
                task.micro_batch_size,
            )
        except ValueError:  # cannot happen for a submitted task (validated), but never crash a sampler
            continue
        tasks.append(
            TaskInput(
                task.pk,
                task.weight,
                spec,
                task.min_workers,
                task.max_workers,
                task.allocation_unit,
                _measured(task, now),
            )
        )
    return tuple(tasks), kind, len(rows)


def get_healthy_cluster_optimum(now: datetime | None = None) -> float:
    """The healthy-cluster optimum WAF (FLOP/s) right now."""
    tasks, kind, capacity = load_inputs(now)
    if kind is None:
        return 0.0
    return healthy_optimum(tasks, kind, capacity)
