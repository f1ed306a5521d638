"""The resume plan every rank computes from the gathered rank states (agents.training.elastic)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.training.elastic import RankState, plan_resume, redistribute, split_micro_batches


def _s(
    rank: int, dp_rank: int, *, has: bool = True, nxt: int = 5, done: tuple[int, ...] = (), **kw: object
) -> RankState:
    return RankState(
        rank=rank,
        node=str(kw.pop("node", "a")),
        dp_rank=dp_rank,
        shard=(0, 0),
        has_state=has,
        next_iteration=nxt,
        done=done,
        live_iteration=nxt if has else None,
        old_rank=rank if has else None,
        **kw,  # type: ignore[arg-type]
    )


def test_split_is_contiguous_and_balanced() -> None:
    assert split_micro_batches(4, 2) == [(0, 1), (2, 3)]
    assert split_micro_batches(4, 3) == [(0, 1), (2,), (3,)]
    with pytest.raises(ValueError, match="cannot split"):
        split_micro_batches(4, 0)


@given(st.integers(1, 24), st.integers(1, 6), st.data())
def test_redistribution_covers_every_micro_batch_once(num: int, dp: int, data: st.DataObject) -> None:
    owners = split_micro_batches(num, dp)
    kept = {r: data.draw(st.sampled_from([(), owners[r]])) for r in range(dp)}
    extra = redistribute(num, kept, dp)
    every = sorted(k for r in range(dp) for k in (*kept[r], *extra[r]))
    assert every == list(range(num))
    loads = [len(kept[r]) + len(extra[r]) for r in range(dp)]
    # as balanced as the kept work allows: nobody gets extra work while above the lightest
    light = min(loads)
    assert all(not extra[r] or loads[r] <= light + 1 for r in range(dp))


def test_a_lost_replica_before_the_all_reduce_keeps_the_survivors_partial_sums() -> None:
    # DP4 -> DP3 on 12 micro-batches: three survivors finished their 3 each, replica 3 is gone
    states = [_s(r, r, done=tuple(range(3 * r, 3 * r + 3))) for r in range(3)]
    plan = plan_resume(states, num_micro_batches=12, dp=3, pp=1)
    assert (plan.mode, plan.resume_iteration, plan.receivers) == ("live", 5, frozenset())
    assert plan.kept == {0: (0, 1, 2), 1: (3, 4, 5), 2: (6, 7, 8)}
    assert plan.extra == {0: (9,), 1: (10,), 2: (11,)}


def test_a_fresh_rank_receives_from_the_named_up_to_date_holder() -> None:
    states = [
        _s(0, 0, done=(0, 1)),
        _s(1, 1, has=False, nxt=0, source_old_rank=0, wants="same_node"),
    ]
    plan = plan_resume(states, num_micro_batches=4, dp=2, pp=1)
    assert plan.sources == {(0, 0): 0}
    assert plan.receivers == frozenset({1})
    assert plan.kept == {0: (0, 1), 1: ()}
    assert plan.extra == {0: (), 1: (2, 3)}


def test_a_survivor_behind_the_others_takes_their_state_and_drops_its_partials() -> None:
    # rank 1's all-reduce failed while rank 0's completed and stepped (it is one iteration ahead)
    states = [_s(0, 0, nxt=6), _s(1, 1, nxt=5, done=(2, 3))]
    plan = plan_resume(states, num_micro_batches=4, dp=2, pp=1)
    assert (plan.resume_iteration, plan.receivers) == (6, frozenset({1}))
    assert plan.kept == {0: (), 1: ()}
    assert plan.extra == {0: (0, 1), 1: (2, 3)}  # an iteration boundary: the ordinary split


def test_pipeline_parallel_never_keeps_partial_results() -> None:
    states = [_s(0, 0, done=(0, 1))]
    assert plan_resume(states, num_micro_batches=2, dp=1, pp=2).kept == {0: ()}


def test_stored_sources_or_no_live_holder_mean_a_stored_copy() -> None:
    assert (
        plan_resume([_s(0, 0, wants="checkpoint")], num_micro_batches=4, dp=1, pp=1).stored_kind
        == "checkpoint"
    )
    nobody = plan_resume([_s(0, 0, has=False, nxt=0)], num_micro_batches=4, dp=1, pp=1)
    assert (nobody.mode, nobody.stored_kind) == ("stored", None)
    # a shard without an up-to-date holder (its only live copy lags): stored as well
    lag = [
        RankState(0, "a", 0, (0, 0), True, 6),
        RankState(1, "a", 0, (1, 0), True, 5),
    ]
    assert plan_resume(lag, num_micro_batches=4, dp=1, pp=1).mode == "stored"
