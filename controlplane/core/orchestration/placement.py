"""Placement: a worker count and a parallel layout -> concrete devices and Megatron ranks.

Rules (docs/ARCHITECTURE.md §7.3-7.6):

- **Keep** the task's current healthy devices where possible (their processes may survive in place);
  fill from free devices, **preferring nodes the task already uses**, then the nodes with the most
  free devices (fewer nodes, less inter-node traffic), then by name (deterministic).
- A **tensor-parallel group never straddles nodes**: the ``tp`` consecutive ranks of a group sit on one
  node.
- **Rank order** follows Megatron-Core's default ``order="tp-cp-ep-dp-pp"``
  (``megatron/core/parallel_state.py``): tp varies fastest, then dp, then pp, so
  ``rank = tp_rank + tp * (dp_rank + dp * pp_rank)`` (cp = ep = 1 here).
- **Stable**: when the chosen devices and the layout are unchanged, every device keeps its rank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple


class PlacementError(ValueError):
    """The devices on offer cannot host the requested count and layout."""


class DeviceSlot(NamedTuple):
    """A usable device: its node, its index on the node and its id (ordered in that order). A named tuple:
    every decision builds, sorts and hashes one per device of the fleet (16,384 at 2,048 nodes), and a
    frozen dataclass cost 2.5 times as much to build and 4 times as much to sort."""

    node: str
    index: int  # type: ignore[assignment]  # the field replaces tuple.index (never called on a slot)
    device_id: int


@dataclass(frozen=True, slots=True)
class Layout:
    tp: int = 1
    pp: int = 1
    dp: int = 1

    def __post_init__(self) -> None:
        if self.tp < 1 or self.pp < 1 or self.dp < 1:
            raise ValueError("tp, pp and dp must be >= 1")

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp


@dataclass(frozen=True, slots=True)
class RankPlacement:
    rank: int
    device: DeviceSlot
    tp_rank: int
    pp_rank: int
    dp_rank: int


def rank_coordinates(rank: int, layout: Layout) -> tuple[int, int, int]:
    """``(tp_rank, dp_rank, pp_rank)`` of a global rank under Megatron's tp-dp-pp order."""
    if not 0 <= rank < layout.world_size:
        raise ValueError(f"rank {rank} outside world size {layout.world_size}")
    tp_rank = rank % layout.tp
    dp_rank = (rank // layout.tp) % layout.dp
    pp_rank = rank // (layout.tp * layout.dp)
    return tp_rank, dp_rank, pp_rank


def place(
    layout: Layout,
    current: Mapping[DeviceSlot, int],
    free: Sequence[DeviceSlot],
) -> list[RankPlacement]:
    """Place ``layout.world_size`` ranks.

    ``current``: the task's current *healthy* devices with their current rank; ``free``: devices no
    task holds. Returns one :class:`RankPlacement` per rank, in rank order. Raises
    :class:`PlacementError` when there are not enough whole TP groups on the offered nodes.
    """
    count, tp = layout.world_size, layout.tp
    groups_needed = count // tp
    overlap = set(current) & set(free)
    if overlap:
        raise ValueError(f"devices offered both as current and free: {sorted(overlap)}")
    by_node_cur: dict[str, list[DeviceSlot]] = {}
    for d in sorted(current, key=lambda s: (current[s], s)):
        by_node_cur.setdefault(d.node, []).append(d)
    by_node_free: dict[str, list[DeviceSlot]] = {}
    for d in sorted(free):
        by_node_free.setdefault(d.node, []).append(d)
    nodes = sorted(
        set(by_node_cur) | set(by_node_free),
        key=lambda n: (
            -len(by_node_cur.get(n, [])),
            -(len(by_node_cur.get(n, [])) + len(by_node_free.get(n, []))),
            n,
        ),
    )
    cap = {n: (len(by_node_cur.get(n, [])) + len(by_node_free.get(n, []))) // tp for n in nodes}
    take: dict[str, int] = dict.fromkeys(nodes, 0)
    left = groups_needed
    # 1) groups made of current devices only, nodes with the most current devices first
    for n in nodes:
        g = min(left, len(by_node_cur.get(n, [])) // tp)
        take[n] += g
        left -= g
    # 2) then top up: nodes the task already uses first (same order), then free nodes
    for n in nodes:
        g = min(left, cap[n] - take[n])
        take[n] += g
        left -= g
    if left > 0:
        raise PlacementError(
            f"{count} ranks in TP groups of {tp}: only {groups_needed - left} whole groups fit on the "
            f"offered devices"
        )
    # per node: current devices first (in old-rank order), then free ones; chunk into TP groups
    groups: list[tuple[tuple[int, int, str, int], list[DeviceSlot]]] = []
    for n in nodes:
        if take[n] == 0:
            continue
        chosen = (by_node_cur.get(n, []) + by_node_free.get(n, []))[: take[n] * tp]
        for i in range(take[n]):
            members = chosen[i * tp : (i + 1) * tp]
            old = [current[d] for d in members if d in current]
            # groups that already existed keep their relative order; new groups come after
            key = (0, min(old), n, i) if old else (1, 0, n, i)
            groups.append((key, members))
    groups.sort(key=lambda g: g[0])
    out: list[RankPlacement] = []
    for gi, (_, members) in enumerate(groups):
        for pos, d in enumerate(members):
            rank = gi * tp + pos
            tp_rank, dp_rank, pp_rank = rank_coordinates(rank, layout)
            out.append(RankPlacement(rank, d, tp_rank, pp_rank, dp_rank))
    return out


def survivors(
    old: Mapping[DeviceSlot, int], new: Sequence[RankPlacement], alive: frozenset[int] | set[int]
) -> list[tuple[int, int]]:
    """``(old_rank, new_rank)`` for every device kept whose old process is alive (``alive``: old ranks)."""
    out = []
    for p in new:
        r = old.get(p.device)
        if r is not None and r in alive:
            out.append((r, p.rank))
    return sorted(out)
