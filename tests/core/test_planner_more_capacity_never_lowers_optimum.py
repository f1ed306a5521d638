from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.core.planning import PlanningProblem, plan
from tests.core.planning_strategies import problems


@settings(max_examples=100, deadline=None)
@given(problems(max_tasks=5, max_units=8), st.integers(1, 4))
def test_adding_capacity_never_lowers_the_optimal_objective(problem: PlanningProblem, extra: int) -> None:
    more = replace(problem, capacity_units=problem.capacity_units + extra)
    assert plan(more).objective >= plan(problem).objective
