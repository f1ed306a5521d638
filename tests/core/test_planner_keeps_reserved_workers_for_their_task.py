"""Workers a task holds on a suspect node (``TaskState.reserved``) take no shared capacity: the task keeps
them, no other task can have them, and the DP stays exact (equal to brute force); the loss of the
suspect node, precomputed, takes those workers and leaves the shared capacity as it was."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.core.planning import (
    ClusterState,
    NodeLost,
    PlanningProblem,
    PrecomputedPlans,
    TaskState,
    ThroughputTable,
    apply_event,
    brute_force_plan,
    plan,
)
from tests.core.planning_strategies import problems

LINEAR = ThroughputTable.from_points({1: 10.0, 2: 20.0, 3: 30.0})


@st.composite
def problems_with_reserves(draw: st.DrawFn) -> PlanningProblem:
    p = draw(problems())
    tasks = tuple(replace(t, reserved=draw(st.integers(0, t.workers))) for t in p.tasks)
    return replace(p, tasks=tasks)


@settings(max_examples=150, deadline=None)
@given(problems_with_reserves())
def test_dp_equals_brute_force_with_reserved_workers(problem: PlanningProblem) -> None:
    dp = plan(problem)
    bf = brute_force_plan(problem)
    assert dp.objective == bf.objective
    assert dp.moved_workers == bf.moved_workers
    pairs = zip(problem.tasks, dp.tasks, strict=True)
    shared = sum(t.shared_units(a.new_workers, problem.unit_size) for t, a in pairs)
    assert shared <= problem.capacity_units


def test_a_task_keeps_its_reserved_workers_on_top_of_the_shared_capacity() -> None:
    held = TaskState("held", 1.0, LINEAR, workers=2, reserved=1, max_workers=2)
    got = plan(PlanningProblem((held,), capacity_units=1, d_running_s=100.0, unit_size=1))
    assert got.new_counts == {"held": 2}
    assert got.moved_workers == 0
    assert "2/2 workers used" in got.explain()


def test_another_task_cannot_take_reserved_workers_however_heavy() -> None:
    held = TaskState("held", 1.0, LINEAR, workers=1, reserved=1, max_workers=1)
    heavy = TaskState("heavy", 100.0, LINEAR, max_workers=3)
    got = plan(PlanningProblem((held, heavy), capacity_units=1, d_running_s=100.0, unit_size=1))
    assert got.new_counts == {"held": 1, "heavy": 1}


def test_losing_the_suspect_node_takes_its_reserved_workers_not_shared_capacity() -> None:
    held = TaskState("held", 1.0, LINEAR, workers=2, reserved=1, max_workers=3)
    other = TaskState("other", 1.0, LINEAR, workers=1, max_workers=3)
    state = ClusterState(
        PlanningProblem((held, other), capacity_units=3, d_running_s=100.0, unit_size=1),
        placement={"a": {"held": 1}, "b": {"other": 1}, "c": {}, "s": {"held": 1}},
        suspect_nodes=("s",),
    )
    after = apply_event(state, NodeLost("s"))
    assert after.capacity_units == 3
    assert after.task("held") == replace(held, workers=1, reserved=0, hit=True)
    healthy_loss = apply_event(state, NodeLost("a"))
    assert healthy_loss.capacity_units == 2
    assert healthy_loss.task("held") == replace(held, workers=1, hit=True)
    precomputed = PrecomputedPlans.build(state).lookup(NodeLost("s"))
    assert precomputed is not None
    assert precomputed.new_counts == plan(after).new_counts
