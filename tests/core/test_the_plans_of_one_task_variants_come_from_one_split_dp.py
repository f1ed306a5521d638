"""The split DP answers every one-task variant of a problem as a fresh DP would: the same objective and the
same number of moved workers (where several plans tie, it may pick another of them), and within capacity."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.core.planning import (
    ClusterState,
    NodeLost,
    PlannedAllocation,
    PlanningProblem,
    PrecomputedPlans,
    SplitDP,
    TaskState,
    ThroughputTable,
    TransitionModel,
    apply_event,
    plan,
)
from tests.core.planning_strategies import cluster_states, problems


def _shared_units(problem: PlanningProblem, got: PlannedAllocation) -> int:
    return sum(
        t.shared_units(a.new_workers, problem.unit_size)
        for t, a in zip(problem.tasks, got.tasks, strict=True)
    )


def _assert_as_good_as_a_fresh_dp(problem: PlanningProblem, got: PlannedAllocation | None) -> None:
    assert got is not None
    fresh = plan(problem)
    assert [a.task_id for a in got.tasks] == [t.task_id for t in problem.tasks]
    assert got.objective == pytest.approx(fresh.objective, rel=1e-9, abs=1e-9)
    assert got.moved_workers == fresh.moved_workers
    assert _shared_units(problem, got) <= problem.capacity_units
    assert got.capacity_units == problem.capacity_units


@st.composite
def variants(draw: st.DrawFn) -> tuple[PlanningProblem, PlanningProblem]:
    """A base problem and one variant: one task changed (workers, hit, reserve, weight), one removed, or
    none; the capacity unchanged, smaller, or larger."""
    base = draw(problems(max_tasks=5, max_units=8))
    tasks = list(base.tasks)
    kind = draw(st.sampled_from(["change", "remove", "none"]))
    i = draw(st.integers(0, len(tasks) - 1))
    if kind == "change":
        t = tasks[i]
        workers = draw(st.integers(0, t.workers)) if t.workers else 0
        tasks[i] = replace(
            t,
            workers=workers,
            reserved=draw(st.integers(0, workers)),
            hit=draw(st.booleans()),
            weight=float(draw(st.integers(0, 4))),
        )
    elif kind == "remove":
        del tasks[i]
    capacity = max(base.capacity_units + draw(st.integers(-3, 2)), 0)
    return base, replace(base, tasks=tuple(tasks), capacity_units=capacity)


@settings(max_examples=300, deadline=None)
@given(variants())
def test_a_one_task_variant_is_planned_as_well_as_by_a_fresh_dp(
    pair: tuple[PlanningProblem, PlanningProblem],
) -> None:
    base, variant = pair
    split = SplitDP(base, max(base.capacity_units, variant.capacity_units))
    _assert_as_good_as_a_fresh_dp(variant, split.plan(variant))


@settings(max_examples=60, deadline=None)
@given(cluster_states(max_tasks=4, max_nodes=8))
def test_every_likely_event_of_a_cluster_is_read_from_the_split_tables(state: ClusterState) -> None:
    pre = PrecomputedPlans.build(state)
    distinct = set(pre.by_problem)
    if len(distinct) > 1:
        assert pre.split == len(distinct)  # not one fresh DP
    for ev, got in pre.plans.items():
        _assert_as_good_as_a_fresh_dp(apply_event(state, ev), got)


TABLE = ThroughputTable.from_points({8: 8.0, 16: 15.0, 24: 21.0, 32: 26.0})


def _base() -> PlanningProblem:
    tm = TransitionModel(state_bytes=0.0, restart_s=10.0)
    return PlanningProblem(
        (
            TaskState("a", 1.0, TABLE, workers=16, transition=tm),
            TaskState("b", 2.0, TABLE, workers=8, transition=tm),
        ),
        5,
        3600.0,
        unit_size=8,
    )


def test_a_problem_that_is_not_a_one_task_variant_is_left_to_a_fresh_dp() -> None:
    base = _base()
    split = SplitDP(base)
    a, b = base.tasks
    assert split.plan(replace(base, tasks=(replace(a, hit=True), replace(b, hit=True)))) is None
    assert split.plan(replace(base, tasks=(b, a))) is None
    assert split.plan(replace(base, capacity_units=6)) is None  # above the tables
    assert split.plan(replace(base, d_running_s=60.0)) is None
    assert split.plan(replace(base, tasks=(a, b, replace(a, task_id="c")))) is None
    assert split.plan(replace(base, tasks=(replace(a, hit=True), b))) is not None


def test_a_node_shared_by_two_tasks_is_planned_afresh_and_the_rest_from_the_tables() -> None:
    base = _base()
    placement = {"n0": {"a": 8}, "n1": {"a": 4, "b": 4}, "n2": {"b": 4}, "n3": {}, "n4": {}}
    state = ClusterState(base, placement, ("r0",))
    pre = PrecomputedPlans.build(state)
    shared = apply_event(state, NodeLost("n1"))
    assert pre.lookup(NodeLost("n1")).new_counts == plan(shared).new_counts  # type: ignore[union-attr]
    assert pre.split == len(set(pre.by_problem)) - 1
    for ev, got in pre.plans.items():
        _assert_as_good_as_a_fresh_dp(apply_event(state, ev), got)
