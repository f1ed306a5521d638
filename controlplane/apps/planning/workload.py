"""The workload manager (docs/ARCHITECTURE.md §7.3-7.6): plan every task, then carry each change out as a
transition.

One decision at a time: every entry point takes a PostgreSQL advisory lock (transaction-scoped) first,
so two re-plans, or a re-plan and a failure action, never interleave; a crashed worker's lock goes with
its connection.

``replan``: rows → :func:`~controlplane.apps.planning.selectors.load_cluster` → the pure planner (a
lookup in the plans precomputed for the previous state when the problem matches one of them, a fresh DP
otherwise) → a ``Plan`` row → per changed task, placement (:mod:`controlplane.core.orchestration`)
and a ``Transition`` with its commands in the outbox. All in one transaction: the agents see the
commands only if the plan, the allocations and the epochs committed.

A healthy task changes only when the plan says so, and the planner's objective G already charges the
transition (F(t, x)·D_transition) against the gain, so "reconfigure only when it pays" holds by
construction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from controlplane.apps.fleet.authority import trusted_snapshot_holders
from controlplane.apps.fleet.choices import CommandType, NodeState
from controlplane.apps.fleet.outbox import notify_agent_on_commit
from controlplane.apps.fleet.services import do_enqueue_command, do_fail_stale_commands
from controlplane.apps.incidents.choices import Severity
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.incidents.selectors import reported_rank
from controlplane.apps.incidents.services import do_raise_alert
from controlplane.apps.planning.choices import PlanTrigger, StepState, TransitionKind, TransitionState
from controlplane.apps.planning.models import Plan, Transition, TransitionStep
from controlplane.apps.planning.plan_store import SharedPlans
from controlplane.apps.planning.selectors import (
    ClusterView,
    HeldDevice,
    cluster_state_of,
    get_recent_iteration_s,
    load_cluster,
    task_spec,
)
from controlplane.apps.planning.services import (
    PlanRecord,
    do_create_transition,
    do_record_plan,
    do_set_transition_state,
)
from controlplane.apps.planning.triggers import request_transition_advance
from controlplane.apps.training.choices import TaskState
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.apps.training.services import (
    Placement,
    do_allocate_devices,
    do_bump_epoch,
    do_release_devices,
    do_set_task_plan_fields,
    do_set_task_state,
)
from controlplane.core.orchestration import DeviceSlot, Layout, PlacementError, RankPlacement, place
from controlplane.core.planning import Plan as CorePlan
from controlplane.core.planning import PlanningProblem, PrecomputedPlans, apply_event
from controlplane.core.planning import plan as dp_plan
from controlplane.core.protocol import (
    ModelSpec,
    ParallelConfig,
    RankAssignment,
    RankMapping,
    Rendezvous,
    SnapshotInfo,
    StateSource,
    WorkerLaunch,
)
from controlplane.core.transitions.deadlines import step_deadline_s
from controlplane.core.transitions.migration import LiveShard, NewRank, SnapshotCopy, choose_state_sources
from controlplane.core.transitions.snapshots import complete_snapshot_copies

log = logging.getLogger(__name__)

LOCK_KEY = 0x756E6963  # "unic": one key serialises every orchestration decision


def orchestration_lock() -> None:
    """Take the orchestration lock until the current transaction ends (call inside ``atomic``)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])


def next_rendezvous_port() -> int:
    """A fresh port per (task, epoch): a database sequence, so no two epochs share one until the span
    wraps (stale gloo addresses break restarts, notes/stack-facts.md)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval('planning_rendezvous_port_seq')")
        (n,) = cursor.fetchone()
    return int(settings.UNICRON_RENDEZVOUS_PORT_BASE) + int(n) % int(settings.UNICRON_RENDEZVOUS_PORT_SPAN)


# --------------------------------------------------------------------------------------------------
# Precomputed plans (shared by every control-plane process through Redis, see plan_store)
# --------------------------------------------------------------------------------------------------


@cache
def precomputed() -> SharedPlans:
    return SharedPlans()


def refresh_precomputed() -> None:
    """Precompute the plans of the state as it is now (after a decision committed its allocations) and
    share them with every process."""
    try:
        state = cluster_state_of(load_cluster())
        cache_ = precomputed()
        pre = PrecomputedPlans.build(state, cache=cache_.local)
        plans = {apply_event(state, ev): p for ev, p in pre.plans.items()}
        plans.setdefault(state.problem, cache_.local.get(state.problem) or dp_plan(state.problem))
        cache_.publish(plans, pre.build_time_s * 1000.0)
    except Exception:  # never let an optimisation break the decision that preceded it
        log.exception("precomputing plans failed")


# --------------------------------------------------------------------------------------------------
# Re-planning
# --------------------------------------------------------------------------------------------------


@dataclass
class Decision:
    plan: Plan
    transitions: list[Transition]


def _decision_rows(core: CorePlan, view: ClusterView) -> list[dict[str, Any]]:
    names = {str(t.pk): t.name for t in view.tasks}
    configs = {str(t.pk): t.parallel_config or None for t in view.tasks}
    rows = []
    for a in core.tasks:
        cfg = a.config
        rows.append(
            {
                "task": int(a.task_id),
                "name": names.get(a.task_id, ""),
                "old_workers": a.old_workers,
                "new_workers": a.new_workers,
                "old_config": configs.get(a.task_id),
                "new_config": _config_json(cfg) if cfg is not None and a.new_workers else None,
                "waf": a.waf,
                "gain": a.gain,
                "transition_penalty": a.transition_penalty,
            }
        )
    return rows


def _config_json(cfg: Any) -> dict[str, Any]:
    return {
        "tp": cfg.tp,
        "pp": cfg.pp,
        "dp": cfg.dp,
        "micro_batch": cfg.micro_batch,
        "num_micro_batches": cfg.num_micro_batches,
        "recompute": cfg.recompute,
    }


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
) -> Decision:
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
        [(d["task"], d["old_workers"], d["new_workers"]) for d in plan.decisions],
    )
    return Decision(plan, transitions)


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
    wanted = {**_config_json(cfg)}
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
        reported = {int(r) for r in ((resume.detail or {}).get("reported") or {})} if resume else set()
        alive &= reported
    return alive


# --------------------------------------------------------------------------------------------------
# Transitions: supersede, suspend, start
# --------------------------------------------------------------------------------------------------


def supersede_transitions(task: TrainingTask, reason: str) -> None:
    """Roll back the task's unfinished transitions: a newer decision replaces them."""
    for t in Transition.objects.filter(
        task=task, state__in=[TransitionState.PENDING, TransitionState.RUNNING]
    ).select_for_update():
        for step in t.steps.exclude(state__in=[StepState.DONE, StepState.FAILED, StepState.SKIPPED]):
            TransitionStep.objects.filter(pk=step.pk).update(
                state=StepState.SKIPPED, finished_at=timezone.now()
            )
        do_set_transition_state(t, TransitionState.ROLLED_BACK, error=reason)


def _deadline(seconds: float) -> Any:
    return timezone.now() + timedelta(seconds=seconds)


def step_deadlines_s(task: TrainingTask) -> tuple[float, float]:
    """Seconds allowed to a command step (acks) and to the resume step (every rank's first iteration)
    of a transition of ``task``: the configured floors, longer on a host where the task's recent
    iterations are slow (:func:`~controlplane.core.transitions.deadlines.step_deadline_s`)."""
    iteration_s = get_recent_iteration_s(task)
    cap = float(settings.UNICRON_DEADLINE_MAX_FACTOR)
    return (
        step_deadline_s(
            float(settings.UNICRON_STEP_DEADLINE_S),
            iteration_s,
            float(settings.UNICRON_STEP_DEADLINE_ITERATIONS),
            cap,
        ),
        step_deadline_s(
            float(settings.UNICRON_RESUME_DEADLINE_S),
            iteration_s,
            float(settings.UNICRON_RESUME_DEADLINE_ITERATIONS),
            cap,
        ),
    )


def suspend(
    plan: Plan,
    task: TrainingTask,
    held: Sequence[HeldDevice],
    view: ClusterView,
    failure_event: FailureEvent | None,
) -> Transition:
    """x -> 0: stop the workers, release the devices, alert (the task waits for capacity)."""
    supersede_transitions(task, f"superseded by plan {plan.pk}")
    t = do_create_transition(
        plan,
        task,
        ["stop"],
        len(held),
        0,
        step_deadlines=[_deadline(step_deadlines_s(task)[0])],
        kind=TransitionKind.SUSPEND,
        failure_event=failure_event,
        previous_epoch=task.epoch,
    )
    do_set_task_state(task, TaskState.SUSPENDED, bump_epoch=True)
    do_release_devices(task)
    do_fail_stale_commands(task.pk, task.epoch, f"superseded: task {task.pk} moved to epoch {task.epoch}")
    reason = (
        f"suspended: fewer usable devices than its minimum ({task.min_workers}) or others yield more "
        f"weighted FLOP/s (plan {plan.pk})"
    )
    do_set_task_plan_fields(task, pending_reason=reason, parallel_config={})
    command_ids = []
    for node_name in sorted({h.slot.node for h in held}):
        node = view.nodes_by_name[node_name]
        if node.state not in REACHABLE_NODE_STATES:
            continue
        cmd = do_enqueue_command(
            node, CommandType.STOP_WORKERS, {"task": task.pk, "grace_s": 5.0}, task.pk, task.epoch, t.pk
        )
        command_ids.append(str(cmd.command_id))
    step = t.steps.get()
    TransitionStep.objects.filter(pk=step.pk).update(
        detail={"commands": command_ids}, state=StepState.RUNNING, started_at=timezone.now()
    )
    t = do_set_transition_state(t, TransitionState.RUNNING)
    do_raise_alert(
        Severity.SEV2,
        f"Task {task.name} (#{task.pk}) suspended below its minimum: {reason}",
        source_event=failure_event,
    )
    request_transition_advance(t.pk)  # no command to wait for: completes at once
    return t


def _saved_checkpoint_iteration(root: Path) -> int | None:
    """The iteration of the newest complete checkpoint under ``root`` (its ``latest`` marker), or None."""
    try:
        it = int((root / "latest").read_text().strip())
    except (OSError, ValueError):
        return None
    return it if (root / f"iter_{it:07d}").is_dir() else None


def _checkpoint_dir(task: TrainingTask) -> str:
    return str(Path(str(settings.UNICRON_CHECKPOINT_ROOT)) / f"task-{task.pk}")


def _model_spec(task: TrainingTask, micro_batch: int) -> ModelSpec:
    return ModelSpec(
        layers=task.num_layers,
        hidden=task.hidden_size,
        heads=task.num_attention_heads,
        seq_len=task.seq_length,
        vocab=task.vocab_size,
        micro_batch=micro_batch,
        global_batch=task.global_batch_size,
    )


def _state_sources(
    task: TrainingTask,
    placements: Sequence[RankPlacement],
    layout: Layout,
    held: Sequence[HeldDevice],
    alive: set[int],
    view: ClusterView | None = None,
) -> tuple[list[StateSource], int]:
    """Nearest-principle sources per new rank (``core.transitions``), and the planned rollback."""
    old = task.parallel_config or {}
    old_layout = (int(old["tp"]), int(old["pp"])) if old.get("tp") and old.get("pp") else None
    live = []
    for h in held:
        if h.rank in alive and old_layout is not None:
            tp_rank = h.rank % old_layout[0]
            dp = int(old.get("dp", 1))
            pp_rank = h.rank // (old_layout[0] * dp)
            live.append(LiveShard(h.rank, h.slot.node, h.slot.index, tp_rank, pp_rank))
    snapshots = snapshot_copies(task, view, old_layout) if view is not None else []
    interval = int(settings.UNICRON_CHECKPOINT_INTERVAL)
    done = int(task.iteration) + 1 if task.iteration or live else int(task.iteration)
    ckpt = (done // interval) * interval - 1 if interval and done >= interval else None
    root = Path(_checkpoint_dir(task))
    if root.parent.is_dir():
        # The checkpoint storage is visible here (shared storage, or one machine): trust what was
        # really saved, not the interval (a save can be skipped, fail, or still be in flight).
        ckpt = _saved_checkpoint_iteration(root)
    plan = choose_state_sources(
        [NewRank(p.rank, p.device.node, p.device.index, p.tp_rank, p.pp_rank) for p in placements],
        new_layout=(layout.tp, layout.pp),
        old_layout=old_layout,
        live=live,
        live_iteration=done if live else None,
        snapshots=snapshots,
        checkpoint_iteration=ckpt,
        checkpoint_path=_checkpoint_dir(task) if ckpt is not None else None,
    )
    return list(plan.sources), plan.rollback_iterations


REACHABLE_NODE_STATES = (NodeState.HEALTHY, NodeState.ISOLATED, NodeState.DRAINING)
"""Nodes whose agents are linked (a stop command reaches them now): not lost, joining or suspect."""


def snapshot_replica_of(node: str, view: ClusterView) -> str | None:
    """The snapshot server of the peer that keeps ``node``'s in-memory snapshot copies (docs/ARCHITECTURE.md
    §7.6): the
    next usable node after it (by name, cyclically) that serves snapshots, so that losing ``node``
    leaves a copy elsewhere; None on a single node."""
    names = sorted(n for n in view.usable_nodes if n != node and view.nodes_by_name[n].snapshot_endpoint)
    if not names:
        return None
    after = [n for n in names if n > node]
    return str(view.nodes_by_name[(after or names)[0]].snapshot_endpoint)


def _node_serving(view: ClusterView, endpoint: str | None) -> str | None:
    if not endpoint:
        return None
    return next((n for n, row in view.nodes_by_name.items() if row.snapshot_endpoint == endpoint), None)


def epoch_layouts(task: TrainingTask) -> dict[int, tuple[int, int, int]]:
    """``(tp, pp, dp)`` of every epoch of ``task`` that has one: the plan of the transition that began
    it, and the task's current layout for the current epoch. A restart or a retry begins a new epoch
    with the same layout, so an older epoch's snapshot is as good a source as the current one's."""
    out: dict[int, tuple[int, int, int]] = {}
    for epoch, decisions in Transition.objects.filter(task=task).values_list("epoch", "plan__decisions"):
        for d in decisions or []:
            cfg = d.get("new_config") if isinstance(d, dict) and d.get("task") == task.pk else None
            if isinstance(cfg, dict) and all(isinstance(cfg.get(k), int) for k in ("tp", "pp", "dp")):
                out[int(epoch)] = (int(cfg["tp"]), int(cfg["pp"]), int(cfg["dp"]))
    cfg = task.parallel_config or {}
    if cfg.get("tp") and cfg.get("pp") and cfg.get("dp"):
        out[task.epoch] = (int(cfg["tp"]), int(cfg["pp"]), int(cfg["dp"]))
    return out


def snapshot_copies(
    task: TrainingTask, view: ClusterView, old_layout: tuple[int, int] | None
) -> list[SnapshotCopy]:
    """Complete in-memory snapshots of ``task`` on usable nodes, as their agents last listed them
    (``core.transitions.complete_snapshot_copies``), of any epoch whose layout is known
    (:func:`epoch_layouts`); the worker's loader reshards a copy whose layout differs.

    Only nodes that ran a worker of the task or are its replica peers are believed
    (``fleet.authority.trusted_snapshot_holders``), and only endpoints no other node claims too."""
    cfg = task.parallel_config or {}
    if old_layout is None or not cfg.get("dp"):
        return []
    trusted = trusted_snapshot_holders(task.pk)
    claimed: dict[str, int] = {}
    for n in (view.nodes_by_name[name] for name in view.usable_nodes):
        if n.snapshot_endpoint:
            claimed[n.snapshot_endpoint] = claimed.get(n.snapshot_endpoint, 0) + 1
    held: dict[str, list[SnapshotInfo]] = {}
    endpoints: dict[str, str] = {}
    for name in view.usable_nodes:
        node = view.nodes_by_name[name]
        if name not in trusted or claimed.get(node.snapshot_endpoint, 0) > 1:
            continue
        infos = []
        for raw in node.snapshots or []:
            try:
                infos.append(SnapshotInfo.model_validate(raw))
            except ValueError:
                continue
        held[name] = infos
        if node.snapshot_endpoint:
            endpoints[name] = node.snapshot_endpoint
    return complete_snapshot_copies(str(task.pk), held, epoch_layouts(task), endpoints)


def start_transition(
    plan: Plan,
    task: TrainingTask,
    placements: Sequence[RankPlacement],
    layout: Layout,
    micro_batch: int,
    kind: TransitionKind,
    held: Sequence[HeldDevice],
    alive: set[int],
    view: ClusterView,
    failure_event: FailureEvent | None,
    config: dict[str, Any],
    survivors: list[tuple[int, int]] | None = None,
) -> Transition:
    """Move ``task`` to a new epoch on ``placements``: allocations, commands, steps (one transaction)."""
    supersede_transitions(task, f"superseded by plan {plan.pk}")
    old_workers = sum(1 for h in held if h.usable)
    old_epoch = task.epoch
    old_config = dict(task.parallel_config or {})
    old_by_device = {h.slot: h.rank for h in held}
    if survivors is None:
        survivors = sorted(
            (old_by_device[p.device], p.rank)
            for p in placements
            if p.device in old_by_device and old_by_device[p.device] in alive
        )
    sources, rollback = _state_sources(task, placements, layout, held, alive, view)
    port = next_rendezvous_port()
    rank0_node = view.nodes_by_name[placements[0].device.node]
    by_node: dict[str, list[RankPlacement]] = {}
    for p in placements:
        by_node.setdefault(p.device.node, []).append(p)
    # Old nodes left out of the new placement stop their workers, isolated and draining ones included:
    # their agents are linked and their workers would otherwise train on (a second copy of the task).
    stop_nodes = sorted(
        {h.slot.node for h in held}
        - set(by_node)
        - {n for n, row in view.nodes_by_name.items() if row.state not in REACHABLE_NODE_STATES}
    )
    command_step = {
        TransitionKind.LAUNCH: "start",
        TransitionKind.RETRY: "retry",
    }.get(kind, "reconfigure")
    names = (["stop"] if stop_nodes else []) + [command_step, "resume"]
    step_s, resume_s = step_deadlines_s(task)
    t = do_create_transition(
        plan,
        task,
        names,
        old_workers,
        len(placements),
        step_deadlines=[_deadline(step_s) for _ in names[:-1]] + [_deadline(resume_s)],
        kind=kind,
        failure_event=failure_event,
        previous_epoch=old_epoch if old_config else None,
        rendezvous_port=port,
        resume_iteration=int(task.iteration) if old_config else None,
        migration_sources={str(s.rank): s.model_dump(mode="json", exclude_none=True) for s in sources},
        detection_latency_s=(
            (failure_event.detected_at - failure_event.occurred_at).total_seconds() if failure_event else None
        ),
    )
    if task.state == TaskState.PENDING:
        task = do_set_task_state(task, TaskState.RUNNING, bump_epoch=True)
    elif task.state in (TaskState.RUNNING, TaskState.SUSPENDED):
        task = do_set_task_state(task, TaskState.RECONFIGURING, bump_epoch=True)
    else:
        task = do_bump_epoch(task)
    assert task.epoch == t.epoch, (task.epoch, t.epoch)
    do_fail_stale_commands(task.pk, task.epoch, f"superseded: task {task.pk} moved to epoch {task.epoch}")
    do_allocate_devices(
        task,
        [
            Placement(p.device.device_id, p.rank, tp_rank=p.tp_rank, pp_rank=p.pp_rank, dp_rank=p.dp_rank)
            for p in placements
        ],
    )
    do_set_task_plan_fields(task, pending_reason="", parallel_config=config)
    rendezvous = Rendezvous(
        master_addr=rank0_node.address or "127.0.0.1",
        master_port=port,
        timeout_s=float(settings.UNICRON_RENDEZVOUS_TIMEOUT_S),
    )
    by_rank_source = {s.rank: s for s in sources}
    commands: list[str] = []
    for node_name in sorted(by_node):
        ranks = by_node[node_name]
        launch = WorkerLaunch(
            model=_model_spec(task, micro_batch),
            parallel=ParallelConfig(tp=layout.tp, pp=layout.pp, dp=layout.dp),
            world_size=layout.world_size,
            ranks=[RankAssignment(rank=p.rank, device=p.device.index) for p in ranks],
            rendezvous=rendezvous,
            iterations=int(task.total_iterations),
            checkpoint_dir=_checkpoint_dir(task),
            checkpoint_interval=int(settings.UNICRON_CHECKPOINT_INTERVAL),
            collective_timeout_s=float(settings.UNICRON_COLLECTIVE_TIMEOUT_S),
            state_sources=[by_rank_source[p.rank] for p in ranks if p.rank in by_rank_source],
            snapshot_interval=int(settings.UNICRON_SNAPSHOT_INTERVAL),
            snapshot_replica=snapshot_replica_of(node_name, view),
        )
        payload: dict[str, Any]
        if kind == TransitionKind.LAUNCH:
            ctype, payload = CommandType.START_WORKERS, {"launch": launch.model_dump(mode="json")}
        elif kind == TransitionKind.RETRY:
            ctype, payload = CommandType.RETRY, {"rendezvous": rendezvous.model_dump(mode="json")}
        else:
            ctype = CommandType.RECONFIGURE
            payload = {
                "launch": launch.model_dump(mode="json"),
                "resume_iteration": None,
                "previous_epoch": old_epoch,
                "previous_parallel": (
                    {"tp": old_config["tp"], "pp": old_config["pp"], "dp": old_config["dp"]}
                    if old_config
                    else None
                ),
                "survivors": [RankMapping(old_rank=o, new_rank=n).model_dump() for o, n in survivors],
            }
        cmd = do_enqueue_command(view.nodes_by_name[node_name], ctype, payload, task.pk, task.epoch, t.pk)
        commands.append(str(cmd.command_id))
        peer = _node_serving(view, launch.snapshot_replica)
        if peer is not None and peer not in by_node:
            # the replica peer runs no worker of the task: its link sends it the task's snapshot key
            notify_agent_on_commit(peer)
    stops: list[str] = []
    for node_name in stop_nodes:
        cmd = do_enqueue_command(
            view.nodes_by_name[node_name],
            CommandType.STOP_WORKERS,
            {"task": task.pk, "grace_s": 2.0},
            task.pk,
            task.epoch,
            t.pk,
        )
        stops.append(str(cmd.command_id))
    now = timezone.now()
    for step in t.steps.all():
        detail: dict[str, Any]
        if step.name == "stop":
            detail = {"commands": stops}
        elif step.name == "resume":
            detail = {"ranks": [p.rank for p in placements], "reported": {}, "planned_rollback": rollback}
        else:
            detail = {"commands": commands, "survivors": survivors}
        TransitionStep.objects.filter(pk=step.pk).update(
            detail=detail, state=StepState.RUNNING, started_at=now
        )
    return do_set_transition_state(t, TransitionState.RUNNING)


def same_placements(task: TrainingTask) -> tuple[list[RankPlacement], Layout]:
    """The task's current allocation as placements (a restart or retry keeps devices and ranks)."""
    cfg = task.parallel_config or {}
    layout = Layout(int(cfg.get("tp", 1)), int(cfg.get("pp", 1)), int(cfg.get("dp", 1)))
    out = []
    for a in (
        Allocation.objects.filter(task=task, active=True).select_related("device__node").order_by("rank")
    ):
        slot = DeviceSlot(a.device.node.name, a.device.index, a.device_id)
        out.append(RankPlacement(a.rank, slot, a.tp_rank, a.pp_rank, a.dp_rank))
    return out, layout


def failure_plan(task: TrainingTask, event: FailureEvent, workers: int) -> Plan:
    """A plan row for an in-place recovery (restart, retry): the task keeps its devices."""
    return do_record_plan(
        PlanRecord(
            trigger=PlanTrigger.FAILURE,
            input_snapshot={"task": task.pk, "action": event.action, "event": event.pk},
            decisions=[
                {
                    "task": task.pk,
                    "name": task.name,
                    "old_workers": workers,
                    "new_workers": workers,
                    "old_config": task.parallel_config,
                    "new_config": task.parallel_config,
                }
            ],
            expected_waf=0.0,
            transition_cost=0.0,
            d_running_s=0.0,
            compute_time_ms=0.0,
            failure_event=event,
            explanation=f"{event.severity} {event.kind}: {event.action} on the same devices",
        )
    )


def restart_in_place(
    task: TrainingTask, event: FailureEvent, failed_ranks: set[int], kind: TransitionKind
) -> Transition | None:
    """sev2 (restart) / sev3 (retry): same devices and ranks, a new epoch and rendezvous. Returns None
    when the task holds no usable allocation any more (the caller re-plans instead)."""
    orchestration_lock()
    view = load_cluster()
    held = view.held.get(task.pk, [])
    if not held or any(not h.usable for h in held) or not task.parallel_config:
        return None
    placements, layout = same_placements(task)
    plan = failure_plan(task, event, len(placements))
    alive = {h.rank for h in held} - failed_ranks
    survivors = [(p.rank, p.rank) for p in placements if p.rank in alive]
    return start_transition(
        plan,
        task,
        placements,
        layout,
        int(task.parallel_config.get("micro_batch", task.micro_batch_size)),
        kind,
        held,
        alive,
        view,
        event,
        dict(task.parallel_config),
        survivors=survivors,
    )


# --------------------------------------------------------------------------------------------------
# Calibration of the throughput model with measured iteration times (docs/ARCHITECTURE.md §7.3)
# --------------------------------------------------------------------------------------------------

CALIBRATION_SAMPLES = 20


def recalibrate_tasks(view: ClusterView) -> int:
    """Fit each running task's efficiency factors to its measured iteration times (median of the last
    samples since its current epoch began, per parallel config it ran) and store them with the table
    they give. Returns how many tasks were recalibrated. The next problem built uses them."""
    import statistics

    from controlplane.apps.metrics.choices import MetricKind
    from controlplane.apps.metrics.models import MetricSample
    from controlplane.apps.planning.selectors import task_table
    from controlplane.apps.training.services import do_store_throughput_table
    from controlplane.core.planning import Measurement, calibrate
    from controlplane.core.planning import ParallelConfig as CoreConfig

    count = 0
    for task in view.tasks:
        cfg = task.parallel_config or {}
        if task.state != TaskState.RUNNING or not cfg.get("tp"):
            continue
        since = (
            Allocation.objects.filter(task=task, active=True)
            .order_by("created_at")
            .values_list("created_at", flat=True)
            .first()
        )
        if since is None:
            continue
        values = list(
            MetricSample.objects.filter(task=task, kind=MetricKind.ITERATION_TIME, at__gte=since)
            .order_by("-at")
            .values_list("value", flat=True)[:CALIBRATION_SAMPLES]
        )
        if not values:
            continue
        core_cfg = CoreConfig(
            int(cfg["tp"]),
            int(cfg["pp"]),
            int(cfg["dp"]),
            int(cfg.get("micro_batch", task.micro_batch_size)),
            int(cfg.get("num_micro_batches", 1)),
            bool(cfg.get("recompute", False)),
        )
        stored: Any = task.throughput_table if isinstance(task.throughput_table, dict) else {}
        known = {
            json_key: m
            for m in stored.get("measurements", [])
            if stored.get("device_kind") == view.device_kind and isinstance(m, dict)
            for json_key in [m.get("key")]
        }
        key = f"{core_cfg.tp}-{core_cfg.pp}-{core_cfg.dp}-{core_cfg.micro_batch}-{core_cfg.num_micro_batches}"
        known[key] = {"key": key, "config": _config_json(core_cfg), "iteration_s": statistics.median(values)}
        measurements = [
            Measurement(
                CoreConfig(
                    m["config"]["tp"],
                    m["config"]["pp"],
                    m["config"]["dp"],
                    m["config"]["micro_batch"],
                    m["config"]["num_micro_batches"],
                    m["config"]["recompute"],
                ),
                float(m["iteration_s"]),
            )
            for m in known.values()
        ]
        result = calibrate(task_spec(task), view.kind, measurements)
        eff = result.efficiency
        table = task_table(task, view, eff)
        do_store_throughput_table(
            task,
            {
                "device_kind": view.device_kind,
                "efficiency": {
                    "compute": eff.compute,
                    "communication": eff.communication,
                    "overhead_s": eff.overhead_s,
                },
                "fitted": list(result.fitted),
                "rms_relative_error_before": result.rms_relative_error_before,
                "rms_relative_error_after": result.rms_relative_error_after,
                "measurements": list(known.values()),
                "points": [
                    {
                        "workers": p.workers,
                        "flops_per_s": p.flops_per_s,
                        "iteration_s": p.iteration_s,
                        "config": _config_json(p.config) if p.config else None,
                    }
                    for p in table.points
                ],
            },
        )
        count += 1
    return count


# --------------------------------------------------------------------------------------------------
# Stragglers: isolate only when running without the slow device is worth more (docs/ARCHITECTURE.md §7.2,
# §7.3-7.5)
# --------------------------------------------------------------------------------------------------


def straggler_isolation_pays(task: TrainingTask, device_id: int, ratio: float) -> tuple[bool, str]:
    """A straggler slows its whole (synchronous) task by ``ratio``. Isolating its device pays when the
    plan without the device yields more WAF than the cluster now yields with the task slowed down;
    otherwise (e.g. the task cannot run on fewer devices) the slow device is kept and an operator told.
    """
    from controlplane.core.planning import waf

    view = load_cluster()
    state = cluster_state_of(view)
    now_waf = 0.0
    for t in state.problem.tasks:
        f = waf(t.weight, t.table, t.workers, t.min_workers, t.max_workers)
        now_waf += f / max(ratio, 1.0) if t.task_id == str(task.pk) else f
    view.usable = [d for d in view.usable if d.device_id != device_id]
    view.held = {
        k: [HeldDevice(h.slot, h.rank, h.usable and h.slot.device_id != device_id) for h in hs]
        for k, hs in view.held.items()
    }
    without = dp_plan(cluster_state_of(view, [task.pk]).problem)
    pays = without.expected_waf > now_waf
    return pays, (
        f"WAF without the device {without.expected_waf:.4g} vs {now_waf:.4g} with the task slowed "
        f"{ratio:.2f}x: {'isolate' if pays else 'keep it'}"
    )
