"""A node's snapshot copy counts (for choose_state_sources) only when its own shards and the replicas
it holds cover every (tp_rank, pp_rank) of that epoch's layout, at one (epoch, iteration)."""

from __future__ import annotations

from controlplane.core.protocol import SnapshotInfo
from controlplane.core.transitions import SnapshotCopy, complete_snapshot_copies, megatron_shard_of


def info(origin: str, iteration: int, ranks: list[int], epoch: int = 1) -> SnapshotInfo:
    return SnapshotInfo(
        task_id="gpt", epoch=epoch, iteration=iteration, ranks=ranks, origin_node=origin, nbytes=1
    )


def test_ranks_map_to_shards_in_megatrons_order() -> None:
    # tp2 x dp2 x pp2: tensor-parallel fastest, then data-parallel, then pipeline
    assert [megatron_shard_of(r, tp=2, pp=2, dp=2) for r in range(8)] == [
        (0, 0),
        (1, 0),
        (0, 0),
        (1, 0),
        (0, 1),
        (1, 1),
        (0, 1),
        (1, 1),
    ]


def test_a_node_with_one_full_dp_replica_holds_a_complete_copy() -> None:
    held = {"a": [info("a", 9, [0, 1])], "b": [info("b", 9, [2])]}  # tp2 x dp2: b lacks tp shard 1
    copies = complete_snapshot_copies("gpt", held, {1: (2, 1, 2)}, {"a": "a:7000"})
    assert copies == [SnapshotCopy(node="a", iteration=9, tp=2, pp=1, endpoint="a:7000")]


def test_own_shards_and_a_peers_replica_together_make_a_complete_copy() -> None:
    # pp2: node a runs stage 0 (rank 0) and keeps node b's replica of stage 1 (rank 1)
    held = {"a": [info("a", 9, [0]), info("b", 9, [1])], "b": [info("b", 9, [1])]}
    assert [c.node for c in complete_snapshot_copies("gpt", held, {1: (1, 2, 1)})] == ["a"]


def test_shards_of_different_iterations_do_not_combine() -> None:
    held = {"a": [info("a", 9, [0]), info("b", 4, [1])]}
    assert complete_snapshot_copies("gpt", held, {1: (1, 2, 1)}) == []


def test_an_epoch_with_an_unknown_layout_is_skipped() -> None:
    assert complete_snapshot_copies("gpt", {"a": [info("a", 9, [0], epoch=7)]}, {1: (1, 1, 1)}) == []
