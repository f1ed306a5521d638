"""choose_state_sources: each new rank takes its state from the nearest copy that holds it —
local_device, same_node, peer_replica (live, same layout), then memory_snapshot (own node's copy before
a peer's), then checkpoint, then none."""

from __future__ import annotations

from controlplane.core.transitions import (
    SOURCE_ORDER,
    LiveShard,
    NewRank,
    SnapshotCopy,
    choose_state_sources,
)

# TP2 x DP2 on two nodes of two devices: node a holds DP replica 0, node b replica 1.
OLD = [
    LiveShard(rank=0, node="a", device=0, tp_rank=0, pp_rank=0),
    LiveShard(rank=1, node="a", device=1, tp_rank=1, pp_rank=0),
    LiveShard(rank=2, node="b", device=0, tp_rank=0, pp_rank=0, endpoint="b:7000"),
    LiveShard(rank=3, node="b", device=1, tp_rank=1, pp_rank=0, endpoint="b:7000"),
]


def test_the_source_order_is_nearest_first() -> None:
    assert SOURCE_ORDER == (
        "local_device",
        "same_node",
        "peer_replica",
        "memory_snapshot",
        "checkpoint",
        "none",
    )


def test_a_surviving_process_on_the_same_device_keeps_its_own_state() -> None:
    plan = choose_state_sources(
        [
            NewRank(rank=0, node="a", device=0, tp_rank=0, pp_rank=0),
            NewRank(rank=1, node="a", device=1, tp_rank=1, pp_rank=0),
        ],
        new_layout=(2, 1),
        old_layout=(2, 1),
        live=OLD[:2],
        live_iteration=42,
    )
    assert [(s.kind, s.source_rank) for s in plan.sources] == [("local_device", 0), ("local_device", 1)]
    assert (plan.resume_iteration, plan.rollback_iterations) == (42, 0)


def test_a_rank_on_a_new_device_of_the_same_node_takes_a_neighbours_state() -> None:
    # device 0 of node a failed; its shard (tp 0) now runs on device 2 of node a; node b still holds it
    plan = choose_state_sources(
        [
            NewRank(rank=0, node="a", device=2, tp_rank=0, pp_rank=0),
            NewRank(rank=1, node="a", device=1, tp_rank=1, pp_rank=0),
        ],
        new_layout=(2, 1),
        old_layout=(2, 1),
        live=[LiveShard(rank=9, node="a", device=3, tp_rank=0, pp_rank=0), *OLD[1:]],
        live_iteration=42,
    )
    assert [(s.kind, s.source_node, s.source_rank) for s in plan.sources] == [
        ("same_node", "a", 9),
        ("local_device", "a", 1),
    ]


def test_a_rank_on_a_replacement_node_takes_a_live_dp_peers_state() -> None:
    # node a is lost; a fresh node c takes its ranks; node b's replica holds every shard
    plan = choose_state_sources(
        [NewRank(rank=r, node="c", device=r, tp_rank=r, pp_rank=0) for r in (0, 1)],
        new_layout=(2, 1),
        old_layout=(2, 1),
        live=OLD[2:],
        live_iteration=42,
        snapshots=[SnapshotCopy(node="c", iteration=39, tp=2, pp=1)],
    )
    assert [(s.kind, s.source_node, s.source_rank, s.endpoint) for s in plan.sources] == [
        ("peer_replica", "b", 2, "b:7000"),
        ("peer_replica", "b", 3, "b:7000"),
    ]
    assert plan.rollback_iterations == 0


def test_without_a_live_holder_of_every_shard_the_own_nodes_snapshot_is_taken_before_a_peers() -> None:
    # only tp shard 0 survives anywhere: live state cannot serve tp 1, so the whole task rolls back
    plan = choose_state_sources(
        [NewRank(rank=r, node=n, device=r, tp_rank=r, pp_rank=0) for r, n in ((0, "a"), (1, "b"))],
        new_layout=(2, 1),
        old_layout=(2, 1),
        live=[OLD[0]],
        live_iteration=42,
        snapshots=[
            SnapshotCopy(node="a", iteration=39, tp=2, pp=1, endpoint="a:7000", path="/dev/shm/a"),
            SnapshotCopy(node="c", iteration=39, tp=2, pp=1, endpoint="c:7000", path="/dev/shm/c"),
        ],
    )
    assert [(s.kind, s.source_node, s.endpoint, s.iteration) for s in plan.sources] == [
        ("memory_snapshot", "a", None, 39),  # its own node's copy: no transfer
        ("memory_snapshot", "a", "a:7000", 39),  # node b has none: fetch from a peer
    ]
    assert (plan.resume_iteration, plan.rollback_iterations) == (40, 2)


def test_the_checkpoint_is_used_when_no_snapshot_exists() -> None:
    plan = choose_state_sources(
        [NewRank(rank=0, node="a", device=0, tp_rank=0, pp_rank=0)],
        new_layout=(1, 1),
        old_layout=(2, 1),
        live=OLD,
        live_iteration=42,
        checkpoint_iteration=29,
        checkpoint_path="/ckpt/iter_0000029",
    )
    [src] = plan.sources
    assert (src.kind, src.path, src.iteration) == ("checkpoint", "/ckpt/iter_0000029", 29)
    assert (plan.resume_iteration, plan.rollback_iterations) == (30, 12)


def test_a_new_task_with_no_state_anywhere_starts_from_zero() -> None:
    plan = choose_state_sources(
        [NewRank(rank=r, node="a", device=r, tp_rank=0, pp_rank=0) for r in (0, 1)],
        new_layout=(1, 1),
        old_layout=None,
        live=[],
        live_iteration=None,
    )
    assert [s.kind for s in plan.sources] == ["none", "none"]
    assert (plan.resume_iteration, plan.rollback_iterations) == (0, 0)
