from hypothesis import given, settings

from controlplane.core.planning import PlanningProblem, brute_force_plan, plan
from tests.core.planning_strategies import problems


@settings(max_examples=150, deadline=None)
@given(problems())
def test_dp_objective_equals_brute_force_and_ties_move_as_few_workers(problem: PlanningProblem) -> None:
    dp = plan(problem)
    bf = brute_force_plan(problem)
    assert dp.objective == bf.objective  # gains are integers: exact
    assert dp.moved_workers == bf.moved_workers
