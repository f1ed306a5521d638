from dataclasses import replace

from controlplane.core.planning import (
    ClusterState,
    NodeLost,
    PlannedAllocation,
    PlanningProblem,
    PrecomputedPlans,
    TaskState,
    ThroughputTable,
    TransitionModel,
    apply_event,
    plan,
)

TABLE = ThroughputTable.from_points({8: 8.0, 16: 15.0, 24: 21.0, 32: 26.0})


def _state(weight_b: float) -> ClusterState:
    tm = TransitionModel(state_bytes=0.0, restart_s=10.0)
    tasks = (
        TaskState("a", 1.0, TABLE, workers=16, transition=tm),
        TaskState("b", weight_b, TABLE, workers=16, transition=tm),
    )
    placement = {"n0": {"a": 8}, "n1": {"a": 8}, "n2": {"b": 8}, "n3": {"b": 8}, "n4": {}}
    return ClusterState(PlanningProblem(tasks, 5, 3600.0, unit_size=8), placement, ("n9",))


def test_nodes_hosting_the_same_workers_share_one_plan_and_one_dp() -> None:
    calls: list[PlanningProblem] = []

    def counting(p: PlanningProblem) -> PlannedAllocation:
        calls.append(p)
        return plan(p)

    pre = PrecomputedPlans.build(_state(1.0), planner=counting)
    assert pre.lookup(NodeLost("n0")) is pre.lookup(NodeLost("n1"))
    assert len(calls) == len(set(calls)) < len(pre.plans)


def test_refresh_replans_only_events_whose_problem_changed() -> None:
    calls: list[PlanningProblem] = []

    def counting(p: PlanningProblem) -> PlannedAllocation:
        calls.append(p)
        return plan(p)

    state = _state(1.0)
    pre = PrecomputedPlans.build(state, planner=counting)
    calls.clear()
    same = pre.refresh(replace(state, returning_nodes=("n9", "n8")))
    # Only the new event (n8 returning) has a problem not seen before -- and it equals n9's problem.
    assert calls == []
    assert same.reused == len(set(map(id, same.plans.values())))
    changed = pre.refresh(_state(2.0))
    assert len(calls) > 0
    for ev, got in changed.plans.items():
        assert got.new_counts == plan(apply_event(changed.state, ev)).new_counts
