"""State migration when a rank enters a transition's epoch (docs/ARCHITECTURE.md §7.6).

Every rank of the new epoch shares its :class:`~agents.training.elastic.RankState` (one
``all_gather_object``), computes the same :func:`~agents.training.elastic.plan_resume`, and then
either (``live``) receives parameters and optimizer state from an up-to-date replica of its shard
(one broadcast per data-parallel group), keeping the interrupted iteration's finished micro-batches,
or (``stored``) loads a stored copy: an in-memory snapshot (:mod:`agents.training.snapshot`) or a
checkpoint (:mod:`agents.training.checkpoint`). The result says where the epoch starts and what the
``TransitionReport`` will tell the coordinator.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from agents.training.assignment import WorkerAssignment
from agents.training.checkpoint import checkpoint_to_load, load_checkpoint
from agents.training.elastic import STORED_KINDS, RankState, broadcast_state, plan_resume, split_micro_batches
from agents.training.hook import TrainingHook
from agents.training.rank_model import RankModel
from controlplane.core.env import env_str
from controlplane.core.protocol import StateSource, TransitionReport


@dataclass(frozen=True)
class TransitionDraft:
    """What the epoch's ``TransitionReport`` says, known after the migration; the iteration and the
    time of the recomputation and of the first iteration come when that iteration is done."""

    from_epoch: int | None
    in_place: bool
    source: str
    source_node: str | None
    source_rank: int | None
    bytes_moved: int
    phases_s: dict[str, float]
    reused_micro_batches: int
    recomputed_micro_batches: int
    rolled_back_iterations: int

    def report(self, iteration: int, recompute_s: float, first_iteration_s: float) -> TransitionReport:
        phases = {**self.phases_s, "recompute": recompute_s, "first_iteration": first_iteration_s}
        return TransitionReport.model_validate({**asdict(self), "phases_s": phases, "iteration": iteration})


@dataclass(frozen=True)
class EpochStart:
    """Where a rank's new epoch starts after the migration."""

    next_iteration: int
    resume_extra: tuple[int, ...] | None
    """Micro-batches of the interrupted iteration this replica computes (None: its own share)."""
    report: TransitionDraft
    """The epoch's ``TransitionReport`` as far as it is known (sent after its first iteration)."""


def migrate(
    state: RankModel,
    assign: WorkerAssignment,
    old: WorkerAssignment,
    survivor: bool,
    next_it: int,
    kept_layout: bool,
    hook: TrainingHook,
    phases_s: dict[str, float],
) -> EpochStart:
    """Bring this rank's state to the new epoch's resume point (a collective: every rank calls it).

    ``old``: the rank's previous assignment (a survivor's); ``next_it``: the survivor's next
    iteration; ``kept_layout``: whether the kept state was put back (same layout);
    ``phases_s``: the time already spent (teardown, rendezvous), to which the migration is added.
    """
    import torch.distributed as dist
    from megatron.core import parallel_state

    t0 = time.perf_counter()
    tspec = assign.transition
    par = assign.launch.parallel
    spec = assign.launch.model
    num_mbs = spec.global_batch // spec.micro_batch
    dp_rank = parallel_state.get_data_parallel_rank()
    dp = parallel_state.get_data_parallel_world_size()
    shard = (
        parallel_state.get_tensor_model_parallel_rank(),
        parallel_state.get_pipeline_model_parallel_rank(),
    )
    mine = assign.own_state_source()
    me = RankState(
        rank=assign.rank,
        node=assign.node,
        dp_rank=dp_rank,
        shard=shard,
        has_state=kept_layout,
        next_iteration=next_it,
        done=tuple(state.done) if kept_layout and state.partial_it == next_it else (),
        live_iteration=next_it if survivor else None,
        old_rank=old.rank if survivor else None,
        wants=mine.kind if mine is not None else None,
        source_old_rank=mine.source_rank if mine is not None else None,
        source_iteration=mine.iteration if mine is not None and mine.kind in STORED_KINDS else None,
        local_snapshots=local_snapshot_iterations(assign.task_id),
    )
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, me)
    states: list[RankState] = list(gathered)
    plan = plan_resume(
        states,
        num_micro_batches=num_mbs,
        dp=dp,
        pp=par.pp,
        # a retry in place runs on its previous launch: the sources it names are an older transition's
        stale_sources=tspec is not None and tspec.kind == "retry",
    )
    print(
        f"[transition] epoch {assign.epoch} rank {assign.rank}: {me} -> {plan}",
        file=sys.stderr,
        flush=True,
    )
    moved, source, source_node, source_rank, rolled_back = 0, "local_device", None, None, 0
    resume_extra: tuple[int, ...] | None = None
    if plan.mode == "live":
        src = plan.sources[shard]
        receive = assign.rank in plan.receivers
        group_needs = any(s.rank in plan.receivers for s in states if s.shard == shard)
        if group_needs:
            moved = broadcast_state(
                state.model, state.optimizer, src, parallel_state.get_data_parallel_group(), receive
            )
        src_state = next(s for s in states if s.rank == src)
        if receive:
            source = "same_node" if src_state.node == assign.node else "peer_replica"
            source_node, source_rank = src_state.node, src_state.old_rank
            state.zero_grads()
        next_it = plan.resume_iteration
        kept = plan.kept.get(dp_rank, ())
        if state.partial_it != next_it or receive or tuple(state.done) != kept:
            state.zero_grads()
        if kept:
            state.partial_it, state.done = next_it, list(kept)
        resume_extra = plan.extra.get(dp_rank, ())
    else:
        wanted = plan.stored_kind or (mine.kind if mine is not None else "checkpoint")
        local = (
            load_local_snapshot(state, assign, plan.local_snapshot, hook)
            if plan.local_snapshot is not None
            else None
        )
        next_it, moved, source = local or load_stored(state, assign, wanted, hook)
        state.zero_grads()
        # how far the task had got: a survivor's next iteration, else what the coordinator said
        reached = plan.live_iteration
        if reached is None and tspec is not None:
            reached = tspec.resume_iteration
        rolled_back = max((reached if reached is not None else next_it) - next_it, 0)
    phases = {**phases_s, "migrate": time.perf_counter() - t0}
    old_own: tuple[int, ...] = ()
    if survivor:
        prev = tspec.previous_parallel if tspec is not None else None
        prev = prev or old.launch.parallel
        old_dp_rank = (old.rank // prev.tp) % prev.dp  # Megatron's rank order: tp fastest, then dp
        old_own = split_micro_batches(num_mbs, prev.dp)[old_dp_rank]
    interrupted = plan.mode == "live" and any(plan.kept.values())
    extra = plan.extra.get(dp_rank, ()) if interrupted else ()
    report = TransitionDraft(
        from_epoch=tspec.from_epoch if (tspec is not None and survivor) else None,
        in_place=survivor,
        source=source,
        source_node=source_node,
        source_rank=source_rank,
        bytes_moved=moved,
        phases_s=phases,
        reused_micro_batches=len(plan.kept.get(dp_rank, ())) if plan.mode == "live" else 0,
        recomputed_micro_batches=sum(1 for k in extra if k not in old_own),
        rolled_back_iterations=rolled_back,
    )
    return EpochStart(next_iteration=next_it, resume_extra=resume_extra, report=report)


def load_stored(
    state: RankModel, assign: WorkerAssignment, kind: str, hook: TrainingHook
) -> tuple[int, int, str]:
    """Load a stored copy; returns (next iteration, bytes loaded, source kind used)."""
    mine = assign.own_state_source()
    if kind == "memory_snapshot":
        loaded = load_snapshot(state, assign, mine, hook)
        if loaded is not None:
            return loaded
        kind = "checkpoint"
    if kind in STORED_KINDS or kind == "checkpoint":
        found = checkpoint_to_load(mine, assign.launch.checkpoint_dir)
        if found is not None:
            it_done, path = found
            load_checkpoint(state, path, hook)
            return it_done + 1, state.state_bytes(), "checkpoint"
    return 0, 0, "none"


def local_snapshot_iterations(task_id: str) -> tuple[int, ...]:
    """The iterations of which this node's snapshot root holds a complete snapshot of the task."""
    from agents.training.snapshot import ENV_SNAPSHOT_DIR, complete_iterations

    root = env_str(ENV_SNAPSHOT_DIR)
    return complete_iterations(root, task_id) if root else ()


def load_local_snapshot(
    state: RankModel, assign: WorkerAssignment, iteration: int, hook: TrainingHook
) -> tuple[int, int, str] | None:
    """Restore the snapshot of ``iteration`` from this node's snapshot root; None: not usable here
    (the caller falls back to the source the coordinator named)."""
    source = StateSource(rank=assign.rank, kind="memory_snapshot", iteration=iteration)
    try:
        return load_snapshot(state, assign, source, hook)
    except Exception as e:  # a piece missing or torn: the named source is the fallback
        print(f"[transition] local snapshot {iteration} not usable: {e}", file=sys.stderr, flush=True)
        return None


def load_snapshot(
    state: RankModel, assign: WorkerAssignment, mine: StateSource | None, hook: TrainingHook
) -> tuple[int, int, str] | None:
    """In-memory snapshot source (:mod:`agents.training.snapshot`); None: none usable here.

    The agent has fetched a peer's replica into its snapshot root when the copy is remote; the
    loader reshards when the layout changed."""
    from agents.training.snapshot import ENV_SNAPSHOT_DIR, SnapshotError, find_snapshot, restore

    root = env_str(ENV_SNAPSHOT_DIR)
    if not root or mine is None or mine.iteration is None:
        return None
    try:
        paths = find_snapshot(root, assign.task_id, mine.iteration)
    except SnapshotError:
        return None
    with hook.slow_phase("checkpoint"):  # hook
        it_done = restore(paths, state.model, state.optimizer)
    return it_done + 1, state.state_bytes(), "memory_snapshot"
