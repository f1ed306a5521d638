"""Rollback rules of choose_state_sources: live state loses nothing; otherwise every rank resumes
from the same, newest complete copy (snapshot when at least as new as the checkpoint), and the
rollback is the live iteration minus the resume iteration."""

from __future__ import annotations

from controlplane.core.transitions import LiveShard, NewRank, SnapshotCopy, choose_state_sources

DP2 = [NewRank(rank=r, node="a", device=r, tp_rank=0, pp_rank=0) for r in (0, 1)]
TP2 = [NewRank(rank=r, node="a", device=r, tp_rank=r, pp_rank=0) for r in (0, 1)]
LIVE_TP2 = [LiveShard(rank=r, node="a", device=r, tp_rank=r, pp_rank=0) for r in (0, 1)]


def test_a_layout_change_never_uses_live_state_even_when_every_shard_survives() -> None:
    """TP2 -> TP1·DP2: live processes hold TP halves, not the TP1 shard; the snapshot is resharded."""
    plan = choose_state_sources(
        DP2,
        new_layout=(1, 1),
        old_layout=(2, 1),
        live=[LiveShard(rank=0, node="a", device=0, tp_rank=0, pp_rank=0)],
        live_iteration=50,
        snapshots=[SnapshotCopy(node="a", iteration=44, tp=2, pp=1, path="/dev/shm/s")],
    )
    assert {s.kind for s in plan.sources} == {"memory_snapshot"}
    assert (plan.resume_iteration, plan.rollback_iterations) == (45, 5)


def test_every_rank_resumes_from_the_newest_snapshot_iteration() -> None:
    plan = choose_state_sources(
        TP2,
        new_layout=(2, 1),
        old_layout=(2, 1),
        live=LIVE_TP2[:1],
        live_iteration=50,
        snapshots=[
            SnapshotCopy(node="a", iteration=39, tp=2, pp=1),
            SnapshotCopy(node="b", iteration=44, tp=2, pp=1, endpoint="b:7000"),
        ],
    )
    # the own node's copy is older: all ranks take the peer's newer one (one iteration for all)
    assert {(s.kind, s.source_node, s.iteration) for s in plan.sources} == {("memory_snapshot", "b", 44)}
    assert plan.resume_iteration == 45


def test_a_snapshot_as_new_as_the_checkpoint_wins_it_is_nearer() -> None:
    plan = choose_state_sources(
        TP2,
        new_layout=(2, 1),
        old_layout=(2, 1),
        live=[],
        live_iteration=50,
        snapshots=[SnapshotCopy(node="a", iteration=44, tp=2, pp=1)],
        checkpoint_iteration=44,
    )
    assert {s.kind for s in plan.sources} == {"memory_snapshot"}


def test_a_checkpoint_newer_than_every_snapshot_wins() -> None:
    plan = choose_state_sources(
        TP2,
        new_layout=(2, 1),
        old_layout=(2, 1),
        live=[],
        live_iteration=50,
        snapshots=[SnapshotCopy(node="a", iteration=39, tp=2, pp=1)],
        checkpoint_iteration=44,
        checkpoint_path="/ckpt",
    )
    assert {(s.kind, s.iteration) for s in plan.sources} == {("checkpoint", 44)}
    assert (plan.resume_iteration, plan.rollback_iterations) == (45, 5)


def test_with_no_copy_at_all_every_completed_iteration_is_lost() -> None:
    plan = choose_state_sources(TP2, new_layout=(2, 1), old_layout=(2, 1), live=[], live_iteration=50)
    assert {s.kind for s in plan.sources} == {"none"}
    assert (plan.resume_iteration, plan.rollback_iterations) == (0, 50)


def test_live_state_loses_nothing() -> None:
    plan = choose_state_sources(
        TP2,
        new_layout=(2, 1),
        old_layout=(2, 1),
        live=LIVE_TP2,
        live_iteration=50,
        snapshots=[SnapshotCopy(node="a", iteration=49, tp=2, pp=1)],
    )
    assert {s.kind for s in plan.sources} == {"local_device"}
    assert (plan.resume_iteration, plan.rollback_iterations) == (50, 0)
