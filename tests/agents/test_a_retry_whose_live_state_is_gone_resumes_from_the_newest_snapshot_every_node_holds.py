"""A retry in place counts on live state; when every process of a shard died anyway (a hang under
pipeline parallelism: no replica holds the stage), the ranks restart with nothing live and the stale
stored source of their old launch. They must resume from the newest snapshot every rank's node holds,
not from iteration 0 with fresh weights (agents.training.elastic.plan_resume)."""

from __future__ import annotations

from pathlib import Path

from agents.training.elastic import RankState, plan_resume
from agents.training.snapshot import COMPLETE, complete_iterations, snapshot_name


def _fresh(rank: int, *, wants: str | None, source_it: int | None, local: tuple[int, ...]) -> RankState:
    return RankState(
        rank=rank,
        node="a" if rank < 2 else "b",
        dp_rank=0,
        shard=(rank % 2, rank // 2),
        has_state=False,
        next_iteration=0,
        wants=wants,
        source_iteration=source_it,
        local_snapshots=local,
    )


def test_fresh_ranks_with_a_stale_snapshot_source_take_the_newest_common_local_snapshot() -> None:
    states = [
        _fresh(0, wants="memory_snapshot", source_it=49, local=(59, 69, 79)),
        _fresh(1, wants="memory_snapshot", source_it=49, local=(59, 69, 79)),
        _fresh(2, wants="memory_snapshot", source_it=49, local=(69, 79)),
        _fresh(3, wants="memory_snapshot", source_it=49, local=(59, 69)),
    ]
    plan = plan_resume(states, num_micro_batches=8, dp=1, pp=2, stale_sources=True)
    assert plan.mode == "stored"
    assert plan.local_snapshot == 69
    # a transition whose coordinator named that copy (not a retry's stale launch): the copy is taken
    assert plan_resume(states, num_micro_batches=8, dp=1, pp=2).local_snapshot is None


def test_fresh_ranks_told_a_live_source_take_the_newest_common_local_snapshot() -> None:
    states = [_fresh(r, wants="local_device", source_it=None, local=(9, 19)) for r in range(4)]
    assert plan_resume(states, num_micro_batches=8, dp=1, pp=2).local_snapshot == 19


def test_a_named_stored_copy_at_least_as_new_is_kept() -> None:
    states = [_fresh(r, wants="memory_snapshot", source_it=79, local=(69, 79)) for r in range(4)]
    assert plan_resume(states, num_micro_batches=8, dp=1, pp=2, stale_sources=True).local_snapshot is None


def test_no_snapshot_common_to_every_rank_leaves_the_named_source() -> None:
    states = [
        _fresh(0, wants="local_device", source_it=None, local=(9,)),
        _fresh(1, wants="local_device", source_it=None, local=(19,)),
    ]
    assert plan_resume(states, num_micro_batches=8, dp=1, pp=2).local_snapshot is None


def test_complete_iterations_lists_only_complete_directories_of_the_task(tmp_path: Path) -> None:
    for origin, task, epoch, it, complete in [
        ("n1", "7", 3, 59, True),
        ("n2", "7", 4, 69, True),
        ("n2", "7", 4, 79, False),
        ("n1", "8", 4, 89, True),
    ]:
        d = tmp_path / origin / task / snapshot_name(epoch, it)
        d.mkdir(parents=True)
        if complete:
            (d / COMPLETE).write_text("")
    assert complete_iterations(tmp_path, "7") == (59, 69)
    assert complete_iterations(tmp_path / "missing", "7") == ()
