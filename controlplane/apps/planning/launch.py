"""Starting a transition: a task moves to a new epoch on new placements — allocations, the agents' commands
in the outbox and the transition's steps, in one transaction (docs/ARCHITECTURE.md §7.5)."""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from controlplane.apps.fleet.choices import NodeState
from controlplane.apps.fleet.outbox import notify_agent_on_commit
from controlplane.apps.fleet.services import (
    do_enqueue_protocol_command,
    do_fail_stale_commands,
)
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.planning.choices import StepState, TransitionKind, TransitionState
from controlplane.apps.planning.models import Plan, Transition
from controlplane.apps.planning.selectors import (
    HeldDevice,
    NodeView,
    get_recent_iteration_s,
)
from controlplane.apps.planning.services import (
    do_create_transition,
    do_set_step_state,
    do_set_transition_state,
    do_skip_open_steps,
)
from controlplane.apps.planning.sources import checkpoint_dir, state_sources
from controlplane.apps.training.choices import TaskState
from controlplane.apps.training.models import TrainingTask
from controlplane.apps.training.selectors import get_task_recipe
from controlplane.apps.training.services import (
    Placement,
    do_allocate_devices,
    do_bump_epoch,
    do_set_task_plan_fields,
    do_set_task_state,
)
from controlplane.core.orchestration import Layout, RankPlacement
from controlplane.core.protocol import (
    Command,
    ModelSpec,
    ParallelConfig,
    RankAssignment,
    RankMapping,
    ReconfigureCommand,
    Rendezvous,
    RetryCommand,
    StartWorkersCommand,
    StopWorkersCommand,
    WorkerLaunch,
)
from controlplane.core.transitions.deadlines import step_deadline_s
from controlplane.core.transitions.steps import StepDetail


def next_rendezvous_port() -> int:
    """A fresh port per (task, epoch): a database sequence, so no two epochs share one until the span
    wraps (stale gloo addresses break restarts, notes/stack-facts.md)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval('planning_rendezvous_port_seq')")
        (n,) = cursor.fetchone()
    return rendezvous_port_of(int(n))


def rendezvous_port_offset() -> int:
    """Where this database's ports start in the range: every database's sequence starts at 1, so control
    planes whose workers share hosts (concurrent test runs, a staging and a production plane) would
    otherwise draw the same ports in the same order. Fixed by the database's name."""
    name = str(connection.settings_dict.get("NAME") or "")
    return zlib.crc32(name.encode()) % int(settings.UNICRON_RENDEZVOUS_PORT_SPAN)


def rendezvous_port_of(n: int) -> int:
    """The port of the sequence's ``n``-th value."""
    span = int(settings.UNICRON_RENDEZVOUS_PORT_SPAN)
    return int(settings.UNICRON_RENDEZVOUS_PORT_BASE) + (n + rendezvous_port_offset()) % span


def parallel_config_json(cfg: Any) -> dict[str, Any]:
    return {
        "tp": cfg.tp,
        "pp": cfg.pp,
        "dp": cfg.dp,
        "micro_batch": cfg.micro_batch,
        "num_micro_batches": cfg.num_micro_batches,
        "recompute": cfg.recompute,
    }


def supersede_transitions(task: TrainingTask, reason: str) -> None:
    """Roll back the task's unfinished transitions: a newer decision replaces them."""
    for t in Transition.objects.filter(
        task=task, state__in=[TransitionState.PENDING, TransitionState.RUNNING]
    ).select_for_update(no_key=True):
        do_skip_open_steps(t)
        do_set_transition_state(t, TransitionState.ROLLED_BACK, error=reason)


def deadline_in(seconds: float) -> Any:
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


REACHABLE_NODE_STATES = (NodeState.HEALTHY, NodeState.ISOLATED, NodeState.DRAINING)
"""Nodes whose agents are linked (a stop command reaches them now): not lost, joining or suspect."""


def snapshot_replica_of(node: str, view: NodeView) -> str | None:
    """The snapshot server of the peer that keeps ``node``'s in-memory snapshot copies (docs/ARCHITECTURE.md
    §7.6): the
    next usable node after it (by name, cyclically) that serves snapshots, so that losing ``node``
    leaves a copy elsewhere; None on a single node."""
    names = sorted(n for n in view.usable_nodes if n != node and view.nodes_by_name[n].snapshot_endpoint)
    if not names:
        return None
    after = [n for n in names if n > node]
    return str(view.nodes_by_name[(after or names)[0]].snapshot_endpoint)


def _node_serving(view: NodeView, endpoint: str | None) -> str | None:
    if not endpoint:
        return None
    return next((n for n, row in view.nodes_by_name.items() if row.snapshot_endpoint == endpoint), None)


def start_transition(
    plan: Plan,
    task: TrainingTask,
    placements: Sequence[RankPlacement],
    layout: Layout,
    micro_batch: int,
    kind: TransitionKind,
    held: Sequence[HeldDevice],
    alive: set[int],
    view: NodeView,
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
    sources, rollback = state_sources(task, placements, layout, held, alive, view)
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
        step_deadlines=[deadline_in(step_s) for _ in names[:-1]] + [deadline_in(resume_s)],
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
    recipe = get_task_recipe(task)
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
            checkpoint_dir=checkpoint_dir(task),
            checkpoint_interval=(
                recipe.checkpoint.interval
                if recipe.checkpoint is not None
                else int(settings.UNICRON_CHECKPOINT_INTERVAL)
            ),
            checkpoint_keep=recipe.checkpoint.keep if recipe.checkpoint is not None else 0,
            collective_timeout_s=float(settings.UNICRON_COLLECTIVE_TIMEOUT_S),
            state_sources=[by_rank_source[p.rank] for p in ranks if p.rank in by_rank_source],
            snapshot_interval=int(settings.UNICRON_SNAPSHOT_INTERVAL),
            snapshot_replica=snapshot_replica_of(node_name, view),
            seed=recipe.seed,
            data=recipe.data,
            optimizer=recipe.optimizer,
            schedule=recipe.schedule,
            architecture=recipe.model,
            eval=recipe.eval,
        )
        fence = {"command_id": str(uuid.uuid4()), "task_id": str(task.pk), "epoch": task.epoch}
        command: Command
        if kind == TransitionKind.LAUNCH:
            command = StartWorkersCommand(**fence, launch=launch)
        elif kind == TransitionKind.RETRY:
            command = RetryCommand(**fence, rendezvous=rendezvous)
        else:
            command = ReconfigureCommand(
                **fence,
                launch=launch,
                resume_iteration=None,
                previous_epoch=old_epoch,
                previous_parallel=(
                    ParallelConfig(tp=old_config["tp"], pp=old_config["pp"], dp=old_config["dp"])
                    if old_config
                    else None
                ),
                survivors=[RankMapping(old_rank=o, new_rank=n) for o, n in survivors],
            )
        cmd = do_enqueue_protocol_command(view.nodes_by_name[node_name], command, t.pk)
        commands.append(str(cmd.command_id))
        peer = _node_serving(view, launch.snapshot_replica)
        if peer is not None and peer not in by_node:
            # the replica peer runs no worker of the task: its link sends it the task's snapshot key
            notify_agent_on_commit(peer)
    stops: list[str] = []
    for node_name in stop_nodes:
        stop = StopWorkersCommand(
            command_id=str(uuid.uuid4()), task_id=str(task.pk), epoch=task.epoch, grace_s=2.0
        )
        cmd = do_enqueue_protocol_command(view.nodes_by_name[node_name], stop, t.pk)
        stops.append(str(cmd.command_id))
    for step in t.steps.all():
        if step.name == "stop":
            detail = StepDetail(commands=stops)
        elif step.name == "resume":
            detail = StepDetail(ranks=[p.rank for p in placements], reported={}, planned_rollback=rollback)
        else:
            detail = StepDetail(commands=commands, survivors=survivors)
        do_set_step_state(step, StepState.RUNNING, detail)
    return do_set_transition_state(t, TransitionState.RUNNING)
