from controlplane.core.planning import PlanningProblem, TaskState, ThroughputTable, TransitionModel, plan

FREE = TransitionModel(state_bytes=0.0, restart_s=0.0, rollback_s=0.0)


def test_two_equal_tasks_keep_their_current_split_when_swapping_is_worth_the_same() -> None:
    table = ThroughputTable.from_points({1: 10.0, 2: 20.0})
    a = TaskState("a", 1.0, table, workers=2, transition=FREE)
    b = TaskState("b", 1.0, table, workers=1, transition=FREE)
    # capacity 3: (2, 1) and (1, 2) are worth the same; only (2, 1) moves nobody.
    p = plan(PlanningProblem((a, b), 3, 100.0, unit_size=1))
    assert p.new_counts == {"a": 2, "b": 1}
    assert p.moved_workers == 0


def test_idle_capacity_is_not_handed_out_when_it_adds_nothing() -> None:
    table = ThroughputTable.from_points({2: 10.0, 4: 10.0})  # a plateau: 4 workers are no faster
    t = TaskState("a", 1.0, table, workers=2, transition=FREE)
    p = plan(PlanningProblem((t,), 4, 100.0, unit_size=1))
    assert p.new_counts == {"a": 2}
