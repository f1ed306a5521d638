"""Re-planning (docs/ARCHITECTURE.md §7.3-7.5): plan every task, then carry each change out as a transition.

``replan``: rows → :func:`~controlplane.apps.planning.selectors.load_cluster` → the pure planner (a
lookup in the plans precomputed for the previous state when the problem matches one of them, a fresh DP
otherwise) → a ``Plan`` row → per changed task, placement (:mod:`controlplane.core.orchestration`)
and a ``Transition`` with its commands in the outbox (:mod:`~controlplane.apps.planning.launch`,
:mod:`~controlplane.apps.planning.suspension`). All in one transaction under the orchestration lock: the
agents see the commands only if the plan, the allocations and the epochs committed.

A healthy task changes only when the plan says so, and the planner's objective G already charges the
transition (F(t, x)·D_transition) against the gain, so "reconfigure only when it pays" holds by
construction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.incidents.selectors import reported_rank
from controlplane.apps.planning.choices import PlanTrigger, TransitionKind, TransitionState
from controlplane.apps.planning.launch import parallel_config_json, start_transition
from controlplane.apps.planning.locking import orchestration_lock
from controlplane.apps.planning.models import Plan, Transition
from controlplane.apps.planning.precomputed import precomputed
from controlplane.apps.planning.records import TaskDecision, config_record, read_decisions
from controlplane.apps.planning.selectors import (
    ClusterView,
    HeldDevice,
    cluster_state_of,
    load_cluster,
)
from controlplane.apps.planning.services import (
    PlanRecord,
    do_record_plan,
)
from controlplane.apps.planning.suspension import suspend
from controlplane.apps.training.choices import TaskState
from controlplane.apps.training.models import TrainingTask
from controlplane.apps.training.services import (
    do_set_task_plan_fields,
)
from controlplane.core.orchestration import DeviceSlot, Layout, PlacementError, place
from controlplane.core.planning import PlannedAllocation, PlanningProblem
from controlplane.core.planning import plan as dp_plan
from controlplane.core.transitions.steps import StepDetail

log = logging.getLogger(__name__)


@dataclass
class PlanDecision:
    plan: Plan
    transitions: list[Transition]


def _decision_rows(core: PlannedAllocation, view: ClusterView) -> list[TaskDecision]:
    names = {str(t.pk): t.name for t in view.tasks}
    configs = {str(t.pk): t.parallel_config for t in view.tasks}
    rows = []
    for a in core.tasks:
        cfg = a.config
        new = config_record(parallel_config_json(cfg)) if cfg is not None and a.new_workers else None
        rows.append(
            TaskDecision(
                task=int(a.task_id),
                name=names.get(a.task_id, ""),
                old_workers=a.old_workers,
                new_workers=a.new_workers,
                old_config=config_record(configs.get(a.task_id)),
                new_config=new,
                waf=a.waf,
                gain=a.gain,
                transition_penalty=a.transition_penalty,
            )
        )
    return rows


def _snapshot(view: ClusterView, problem: PlanningProblem) -> dict[str, Any]:
    return {
        "device_kind": view.device_kind,
        "capacity": problem.capacity_units,
        "usable_nodes": view.usable_nodes,
        "d_running_s": problem.d_running_s,
        "tasks": [
            {
                "task": int(t.task_id),
                "weight": t.weight,
                "workers": t.workers,
                "hit": t.hit,
                "reserved": t.reserved,
                "min_workers": t.min_workers,
                "max_workers": t.max_workers,
                "feasible": list(t.table.feasible_counts),
            }
            for t in problem.tasks
        ],
    }


def replan(
    trigger: str, failure_event: FailureEvent | None = None, hit_tasks: Iterable[int] = ()
) -> PlanDecision:
    """Plan every task and start the transitions. Call inside ``transaction.atomic()``."""
    orchestration_lock()
    view = load_cluster()
    hits = set(hit_tasks)
    state = cluster_state_of(view, hits)
    problem = state.problem
    t0 = time.perf_counter()
    core = precomputed().lookup(problem)
    lookup = core is not None
    if core is None:
        core = dp_plan(problem)
    compute_ms = (time.perf_counter() - t0) * 1000.0
    plan = do_record_plan(
        PlanRecord(
            trigger=PlanTrigger(trigger),
            input_snapshot=_snapshot(view, problem),
            decisions=_decision_rows(core, view),
            expected_waf=core.expected_waf,
            transition_cost=core.transition_cost,
            d_running_s=core.d_running_s,
            compute_time_ms=compute_ms,
            failure_event=failure_event,
            lookup=lookup,
            explanation=core.explain(),
        )
    )
    tasks = {str(t.pk): t for t in view.tasks}
    free = view.free()
    transitions: list[Transition] = []
    # shrinking tasks first: they free the devices the growing ones take
    for a in sorted(core.tasks, key=lambda a: (a.new_workers - a.old_workers, int(a.task_id))):
        task = tasks[a.task_id]
        t = _carry_out(plan, task, a.new_workers, a.config, view, free, task.pk in hits, failure_event)
        if t is not None:
            transitions.append(t)
    log.info(
        "plan %s (%s, %s, %.2f ms): %s",
        plan.pk,
        trigger,
        "lookup" if lookup else "DP",
        compute_ms,
        [(d.task, d.old_workers, d.new_workers) for d in read_decisions(plan.decisions)],
    )
    return PlanDecision(plan, transitions)


def _pending_reason(task: TrainingTask, view: ClusterView, problem_free: int) -> str:
    table_min = task.min_workers
    return (
        f"queued: the plan gives it no devices (needs at least {table_min} of kind {view.device_kind}; "
        f"{problem_free} free, {len(view.usable)} usable; other tasks yield more weighted FLOP/s)"
    )


def _carry_out(
    plan: Plan,
    task: TrainingTask,
    new_workers: int,
    cfg: Any,
    view: ClusterView,
    free: list[DeviceSlot],
    hit: bool,
    failure_event: FailureEvent | None,
) -> Transition | None:
    held = view.held.get(task.pk, [])
    current = view.current(task.pk)
    hit = hit or any(not h.usable for h in held)
    if new_workers == 0:
        if held or task.state in (TaskState.RUNNING, TaskState.RECONFIGURING):
            free[:] = sorted(set(free) | set(view.releasable(current)))  # to the tasks that grow
            return suspend(plan, task, held, view, failure_event)
        do_set_task_plan_fields(task, pending_reason=_pending_reason(task, view, len(free)))
        return None
    layout = Layout(cfg.tp, cfg.pp, cfg.dp)
    wanted = {**parallel_config_json(cfg)}
    # a reconfiguring task whose in-flight transition already targets this count and layout is left to
    # finish it (a re-plan for another reason must not restart it)
    unchanged = (
        not hit
        and task.state in (TaskState.RUNNING, TaskState.RECONFIGURING)
        and len(held) == len(current) == new_workers
        and {k: task.parallel_config.get(k) for k in ("tp", "pp", "dp", "micro_batch")}
        == {k: wanted[k] for k in ("tp", "pp", "dp", "micro_batch")}
    )
    if unchanged:
        return None
    try:
        placements = place(layout, current, free)
    except PlacementError as exc:
        do_set_task_plan_fields(task, pending_reason=f"queued: {exc}")
        log.warning("task %s: %s", task.pk, exc)
        return None
    chosen = {p.device for p in placements}
    free[:] = sorted(
        [d for d in free if d not in chosen] + [d for d in view.releasable(current) if d not in chosen]
    )
    alive = alive_ranks(task, held)
    kind = TransitionKind.RECONFIGURE if alive else TransitionKind.LAUNCH
    return start_transition(
        plan, task, placements, layout, cfg.micro_batch, kind, held, alive, view, failure_event, wanted
    )


def alive_ranks(task: TrainingTask, held: Sequence[HeldDevice]) -> set[int]:
    """Old ranks whose processes are believed alive and healthy: on usable devices, no failure reported
    for them at the current epoch (a worker that saw a peer's failure and says it waits counts as
    alive), and — while the current epoch's transition has not completed — they
    reported progress at this epoch (a process still in its rendezvous with a dead peer is not a
    survivor: it would never join the next epoch's groups)."""
    if task.state not in (TaskState.RUNNING, TaskState.RECONFIGURING):
        return set()
    dead: set[int] = set()
    for ev in FailureEvent.objects.filter(task=task, task_epoch=task.epoch):
        rank, waiting = reported_rank(ev)
        if rank is not None and not waiting:
            dead.add(rank)  # a rank that reported a collective error and waits for its order is alive
    alive = {h.rank for h in held if h.usable and h.rank not in dead}
    current = Transition.objects.filter(task=task, epoch=task.epoch).first()
    if current is not None and current.state != TransitionState.COMPLETED:
        resume = current.steps.filter(name="resume").first()
        reported = set(StepDetail.read(resume.detail).reported) if resume else set()
        alive &= reported
    return alive
