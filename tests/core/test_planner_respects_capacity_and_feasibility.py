from hypothesis import given, settings

from controlplane.core.planning import PlanningProblem, plan
from tests.core.planning_strategies import problems


@settings(max_examples=150, deadline=None)
@given(problems(max_tasks=5, max_units=10))
def test_plan_never_exceeds_capacity_and_uses_only_feasible_counts(problem: PlanningProblem) -> None:
    p = plan(problem)
    assert p.used_workers <= problem.capacity_workers
    for task, a in zip(problem.tasks, p.tasks, strict=True):
        assert a.task_id == task.task_id
        assert a.old_workers == task.workers
        assert a.new_workers % problem.unit_size == 0
        assert a.new_workers == 0 or task.table.is_feasible(a.new_workers)
