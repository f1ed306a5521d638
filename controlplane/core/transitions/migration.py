"""Nearest-principle state migration (docs/ARCHITECTURE.md §7.6).

A rank of the new epoch needs the model + optimizer state of its shard ``(tp_rank, pp_rank)`` under
the new ``(tp, pp)``. The sources, nearest first:

1. ``local_device`` — the rank's own process survives on the same device and already holds that
   shard (the shard layout, i.e. ``tp`` and ``pp``, did not change);
2. ``same_node`` — a surviving process on the same node holds that shard;
3. ``peer_replica`` — a surviving process on another node holds that shard (a live data-parallel
   peer: it sends its state over the new process group);
4. ``memory_snapshot`` — an in-memory snapshot in host memory (this node's, else a peer's replica);
   it is older than the live state, so the whole task rolls back to the snapshot's iteration;
5. ``checkpoint`` — the persistent ``dist_checkpointing`` checkpoint (a longer rollback);
6. ``none`` — no state anywhere: the task starts from iteration 0 (a new task).

Live sources are only usable when *every* shard of the new layout has a live holder and the layout
did not change: all ranks must resume at the same iteration, and live processes are all at the live
iteration. Otherwise the whole task takes the newest complete copy: a snapshot (resharded by
``dist_checkpointing`` when the layout changed), else the checkpoint. Among equally new snapshots a
node's own copy is nearer than a peer's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from controlplane.core.protocol import StateSource, StateSourceKind

SOURCE_ORDER: tuple[StateSourceKind, ...] = (
    "local_device",
    "same_node",
    "peer_replica",
    "memory_snapshot",
    "checkpoint",
    "none",
)
"""Nearest first."""


@dataclass(frozen=True)
class NewRank:
    """A rank of the new epoch: where it runs and which shard it needs."""

    rank: int
    node: str
    device: int
    tp_rank: int
    pp_rank: int


@dataclass(frozen=True)
class LiveShard:
    """A surviving process of the previous epoch (its old rank, placement and shard)."""

    rank: int
    node: str
    device: int
    tp_rank: int
    pp_rank: int
    endpoint: str | None = None


@dataclass(frozen=True)
class SnapshotCopy:
    """A complete in-memory snapshot of the task (every shard of its layout) held on ``node``."""

    node: str
    iteration: int
    tp: int
    pp: int
    endpoint: str | None = None
    path: str | None = None


@dataclass(frozen=True)
class MigrationPlan:
    sources: tuple[StateSource, ...]
    """One per new rank, in rank order."""
    resume_iteration: int
    """The iteration the new epoch runs first."""
    rollback_iterations: int
    """Completed iterations thrown away (0 with live sources)."""


def _shard_key(tp_rank: int, pp_rank: int) -> tuple[int, int]:
    return (tp_rank, pp_rank)


def choose_state_sources(
    new_ranks: Sequence[NewRank],
    *,
    new_layout: tuple[int, int],
    old_layout: tuple[int, int] | None,
    live: Sequence[LiveShard],
    live_iteration: int | None,
    snapshots: Sequence[SnapshotCopy] = (),
    checkpoint_iteration: int | None = None,
    checkpoint_path: str | None = None,
) -> MigrationPlan:
    """Pick each new rank's state source by the nearest principle.

    ``new_layout`` / ``old_layout`` are ``(tp, pp)``; ``live_iteration`` is the next iteration the
    live processes would run (the interrupted one). ``checkpoint_iteration`` is the last iteration
    saved in the persistent checkpoint (resume runs the one after it).
    """
    ranks = sorted(new_ranks, key=lambda r: r.rank)
    same_layout = old_layout is not None and tuple(old_layout) == tuple(new_layout)
    by_shard: dict[tuple[int, int], list[LiveShard]] = {}
    for s in live:
        by_shard.setdefault(_shard_key(s.tp_rank, s.pp_rank), []).append(s)
    needed = {_shard_key(r.tp_rank, r.pp_rank) for r in ranks}
    if same_layout and live_iteration is not None and needed <= set(by_shard):
        return MigrationPlan(
            tuple(_live_source(r, by_shard[_shard_key(r.tp_rank, r.pp_rank)], live_iteration) for r in ranks),
            live_iteration,
            0,
        )
    newest_live = live_iteration if live_iteration is not None else 0
    best_snap = max((s.iteration for s in snapshots), default=None)
    ckpt_next = checkpoint_iteration + 1 if checkpoint_iteration is not None else None
    if best_snap is not None and (ckpt_next is None or best_snap + 1 >= ckpt_next):
        resume = best_snap + 1
        newest = [s for s in snapshots if s.iteration == best_snap]
        sources = tuple(_snapshot_source(r, newest, best_snap) for r in ranks)
        return MigrationPlan(sources, resume, max(newest_live - resume, 0))
    if ckpt_next is not None:
        sources = tuple(
            StateSource(rank=r.rank, kind="checkpoint", path=checkpoint_path, iteration=checkpoint_iteration)
            for r in ranks
        )
        return MigrationPlan(sources, ckpt_next, max(newest_live - ckpt_next, 0))
    return MigrationPlan(tuple(StateSource(rank=r.rank, kind="none") for r in ranks), 0, newest_live)


def _live_source(r: NewRank, holders: list[LiveShard], iteration: int) -> StateSource:
    for h in holders:
        if h.node == r.node and h.device == r.device:
            return StateSource(
                rank=r.rank, kind="local_device", source_node=h.node, source_rank=h.rank, iteration=iteration
            )
    for h in holders:
        if h.node == r.node:
            return StateSource(
                rank=r.rank, kind="same_node", source_node=h.node, source_rank=h.rank, iteration=iteration
            )
    h = min(holders, key=lambda x: (x.node, x.rank))
    return StateSource(
        rank=r.rank,
        kind="peer_replica",
        source_node=h.node,
        source_rank=h.rank,
        endpoint=h.endpoint,
        iteration=iteration,
    )


def _snapshot_source(r: NewRank, copies: list[SnapshotCopy], iteration: int) -> StateSource:
    own = [c for c in copies if c.node == r.node]
    c = own[0] if own else min(copies, key=lambda x: x.node)
    return StateSource(
        rank=r.rank,
        kind="memory_snapshot",
        source_node=c.node,
        endpoint=None if own else c.endpoint,
        path=c.path,
        iteration=iteration,
    )
