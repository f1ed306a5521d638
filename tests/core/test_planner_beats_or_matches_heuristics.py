from hypothesis import given, settings

from controlplane.core.planning import HEURISTICS, PlanningProblem, plan
from tests.core.planning_strategies import problems


@settings(max_examples=100, deadline=None)
@given(problems(max_tasks=5, max_units=10))
def test_dp_objective_is_at_least_every_heuristic_and_heuristics_stay_feasible(
    problem: PlanningProblem,
) -> None:
    best = plan(problem).objective
    for name, heuristic in HEURISTICS.items():
        h = heuristic(problem)
        assert h.method == name
        assert h.used_workers <= problem.capacity_workers
        for task, a in zip(problem.tasks, h.tasks, strict=True):
            assert a.new_workers == 0 or task.table.is_feasible(a.new_workers)
        assert h.objective <= best
