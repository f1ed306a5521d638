from dataclasses import replace

import pytest
from hypothesis import given, settings

from controlplane.core.planning import (
    ClusterState,
    NodeLost,
    NodeReturned,
    PrecomputedPlans,
    TaskCompleted,
    plan,
)
from tests.core.planning_strategies import cluster_states


def _expected_problem_after(state: ClusterState, event: object):  # type: ignore[no-untyped-def]
    """Built independently of apply_event: the problem a fresh DP would be given."""
    p = state.problem
    if isinstance(event, NodeLost):
        lost = state.placement[event.node]
        tasks = tuple(
            replace(t, workers=t.workers - lost[t.task_id], hit=True) if t.task_id in lost else t
            for t in p.tasks
        )
        return replace(p, tasks=tasks, capacity_units=p.capacity_units - 1)
    if isinstance(event, NodeReturned):
        return replace(p, capacity_units=p.capacity_units + 1)
    assert isinstance(event, TaskCompleted)
    return replace(p, tasks=tuple(t for t in p.tasks if t.task_id != event.task_id))


@settings(max_examples=60, deadline=None)
@given(cluster_states())
def test_every_precomputed_decision_equals_a_fresh_dp_for_the_same_event(state: ClusterState) -> None:
    pre = PrecomputedPlans.build(state)
    events = state.likely_events()
    assert len(events) == len(state.placement) + len(state.returning_nodes) + len(state.problem.tasks)
    for ev in events:
        got = pre.lookup(ev)
        assert got is not None
        fresh = plan(_expected_problem_after(state, ev))
        # as good by the DP's own order (objective, then fewest moved workers); of plans that tie on both,
        # the split tables may hold another than a fresh DP's
        assert got.objective == pytest.approx(fresh.objective, rel=1e-9, abs=1e-9)
        assert got.moved_workers == fresh.moved_workers


@settings(max_examples=30, deadline=None)
@given(cluster_states())
def test_an_unforeseen_event_falls_back_to_a_fresh_dp(state: ClusterState) -> None:
    pre = PrecomputedPlans.build(state, events=[])
    ev = NodeLost(sorted(state.placement)[0])
    assert pre.lookup(ev) is None
    assert pre.decide(ev).new_counts == plan(_expected_problem_after(state, ev)).new_counts
