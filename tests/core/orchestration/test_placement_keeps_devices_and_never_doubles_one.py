"""Placement (core.orchestration.placement): no device twice, counts match, TP groups inside a node,
Megatron rank order, current devices kept, stable when nothing changes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.core.orchestration import DeviceSlot, Layout, PlacementError, place, rank_coordinates


def cluster(nodes: int, per_node: int) -> list[DeviceSlot]:
    return [DeviceSlot(f"n{n}", i, n * 100 + i) for n in range(nodes) for i in range(per_node)]


def test_rank_order_is_tp_then_dp_then_pp() -> None:
    layout = Layout(tp=2, pp=2, dp=3)
    coords = [rank_coordinates(r, layout) for r in range(layout.world_size)]
    # (tp_rank, dp_rank, pp_rank): tp varies fastest, then dp, then pp (megatron "tp-cp-ep-dp-pp")
    assert coords[:4] == [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0)]
    assert coords[6] == (0, 0, 1)
    assert coords[-1] == (1, 2, 1)


@settings(max_examples=200, deadline=None)
@given(
    nodes=st.integers(1, 4),
    per_node=st.sampled_from([1, 2, 4]),
    tp=st.sampled_from([1, 2, 4]),
    pp=st.integers(1, 3),
    dp=st.integers(1, 4),
    held=st.integers(0, 8),
)
def test_placement_properties(nodes: int, per_node: int, tp: int, pp: int, dp: int, held: int) -> None:
    devices = cluster(nodes, per_node)
    current = {d: r for r, d in enumerate(devices[:held])}
    free = devices[held:]
    layout = Layout(tp, pp, dp)
    whole_groups = sum(per_node // tp for _ in range(nodes))
    if tp > per_node or layout.world_size // tp > whole_groups:
        with pytest.raises(PlacementError):
            place(layout, current, free)
        return
    out = place(layout, current, free)
    assert [p.rank for p in out] == list(range(layout.world_size))  # counts match, ranks dense
    used = [p.device for p in out]
    assert len(set(used)) == len(used)  # no device twice
    assert set(used) <= set(devices)
    for p in out:  # coordinates consistent with the rank
        assert (p.tp_rank, p.dp_rank, p.pp_rank) == rank_coordinates(p.rank, layout)
    for g in range(0, layout.world_size, tp):  # a TP group sits on one node
        assert len({p.device.node for p in out[g : g + tp]}) == 1
    kept = sum(1 for d in used if d in current)
    # every whole TP group that current devices alone can form is kept (up to the groups needed)
    groups_of_current = sum(sum(1 for d in current if d.node == n) // tp for n in {d.node for d in devices})
    assert kept >= tp * min(layout.world_size // tp, groups_of_current)


@settings(max_examples=100, deadline=None)
@given(
    nodes=st.integers(1, 4),
    per_node=st.sampled_from([2, 4]),
    tp=st.sampled_from([1, 2]),
    dp=st.integers(1, 4),
)
def test_stable_when_nothing_changes(nodes: int, per_node: int, tp: int, dp: int) -> None:
    devices = cluster(nodes, per_node)
    layout = Layout(tp, 1, dp)
    if layout.world_size > len(devices):
        return
    first = place(layout, {}, devices)
    current = {p.device: p.rank for p in first}
    free = [d for d in devices if d not in current]
    again = place(layout, current, free)
    assert [(p.rank, p.device) for p in again] == [(p.rank, p.device) for p in first]


def test_growth_prefers_the_nodes_the_task_already_uses() -> None:
    devices = cluster(3, 4)
    current = {devices[4]: 0, devices[5]: 1}  # two devices on n1
    free = [d for d in devices if d not in current]
    out = place(Layout(1, 1, 4), current, free)
    assert {p.device.node for p in out} == {"n1"}
    assert out[0].device == devices[4]  # survivors keep their ranks
    assert out[1].device == devices[5]


def test_shrink_keeps_current_devices() -> None:
    devices = cluster(2, 2)
    current = {d: r for r, d in enumerate(devices)}
    out = place(Layout(1, 1, 2), current, [])
    assert {p.device for p in out} <= set(current)
    assert all(current[p.device] in (0, 1) for p in out)
