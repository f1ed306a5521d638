"""From what agents report (``SnapshotInfo`` in ``Hello`` / ``Heartbeat``) to the complete in-memory
snapshot copies that :func:`~controlplane.core.transitions.migration.choose_state_sources` takes.

A node's shards of a task at one (epoch, iteration) may come from several origins (its own ranks, a
peer's replica). The node holds a *complete* copy when together they cover every shard
``(tp_rank, pp_rank)`` of that epoch's layout; data-parallel replicas hold the same shards, so one
replica's ranks are enough. Ranks map to shards in megatron's default order (``tp-cp-ep-dp-pp``,
tensor-parallel fastest): ``tp_rank = rank % tp``, ``pp_rank = rank // (tp·dp)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from controlplane.core.protocol import SnapshotInfo
from controlplane.core.transitions.migration import SnapshotCopy


def megatron_shard_of(rank: int, tp: int, pp: int, dp: int) -> tuple[int, int]:
    """``(tp_rank, pp_rank)`` of a global rank in a ``tp x dp x pp`` world (megatron's order)."""
    if not 0 <= rank < tp * pp * dp:
        raise ValueError(f"rank {rank} is outside a world of {tp}x{dp}x{pp}")
    return rank % tp, rank // (tp * dp)


def complete_snapshot_copies(
    task_id: str,
    held: Mapping[str, Sequence[SnapshotInfo]],
    layouts: Mapping[int, tuple[int, int, int]],
    endpoints: Mapping[str, str] | None = None,
) -> list[SnapshotCopy]:
    """The complete copies of ``task_id`` per node, newest (epoch, iteration) first per node.

    ``held``: node -> the infos it reported; ``layouts``: epoch -> ``(tp, pp, dp)`` of that epoch
    (snapshots of an epoch whose layout is unknown are skipped); ``endpoints``: node -> its snapshot
    server ``host:port``.
    """
    endpoints = endpoints or {}
    copies: list[SnapshotCopy] = []
    for node in sorted(held):
        ranks: dict[tuple[int, int], set[int]] = {}
        for info in held[node]:
            if info.task_id == task_id and info.epoch in layouts:
                ranks.setdefault((info.epoch, info.iteration), set()).update(info.ranks)
        for epoch, iteration in sorted(ranks, reverse=True):
            tp, pp, dp = layouts[epoch]
            world = tp * pp * dp
            shards = {megatron_shard_of(r, tp, pp, dp) for r in ranks[(epoch, iteration)] if 0 <= r < world}
            if len(shards) == tp * pp:
                copies.append(
                    SnapshotCopy(node=node, iteration=iteration, tp=tp, pp=pp, endpoint=endpoints.get(node))
                )
    return copies
