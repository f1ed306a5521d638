"""Hypothesis strategies for small planning instances with integer-valued gains (exact ties)."""

from __future__ import annotations

from hypothesis import strategies as st

from controlplane.core.planning import (
    ClusterState,
    PlanningProblem,
    TaskState,
    ThroughputTable,
    TransitionModel,
)

D_RUNNING = 100.0


@st.composite
def tables(draw: st.DrawFn, max_workers: int) -> ThroughputTable:
    counts = draw(st.sets(st.integers(1, max(max_workers, 1)), max_size=5))
    return ThroughputTable.from_points({x: float(draw(st.integers(1, 60))) for x in counts})


@st.composite
def transitions(draw: st.DrawFn) -> TransitionModel:
    # state_bytes = 0 keeps every duration an integer: G is then exact and ties are real ties.
    return TransitionModel(
        state_bytes=0.0, restart_s=float(draw(st.integers(0, 20))), rollback_s=float(draw(st.integers(0, 50)))
    )


@st.composite
def problems(draw: st.DrawFn, max_tasks: int = 4, max_units: int = 6) -> PlanningProblem:
    unit = draw(st.sampled_from([1, 2]))
    cap = draw(st.integers(0, max_units))
    m = draw(st.integers(1, max_tasks))
    tasks = []
    for i in range(m):
        tasks.append(
            TaskState(
                task_id=f"t{i}",
                weight=float(draw(st.integers(0, 4))),
                table=draw(tables(max_units * unit)),
                workers=draw(st.integers(0, max(cap, 1))) * unit,
                hit=draw(st.booleans()),
                transition=draw(transitions()),
            )
        )
    return PlanningProblem(tuple(tasks), cap, D_RUNNING, unit_size=unit)


@st.composite
def cluster_states(draw: st.DrawFn, max_tasks: int = 3, max_nodes: int = 6) -> ClusterState:
    """Nodes of ``unit`` devices, each wholly given to one task or idle (units_per_node = 1)."""
    unit = draw(st.sampled_from([1, 2, 4]))
    n_nodes = draw(st.integers(1, max_nodes))
    m = draw(st.integers(1, max_tasks))
    owner = [draw(st.integers(-1, m - 1)) for _ in range(n_nodes)]
    placement = {f"n{j}": ({f"t{o}": unit} if o >= 0 else {}) for j, o in enumerate(owner)}
    tasks = tuple(
        TaskState(
            task_id=f"t{i}",
            weight=float(draw(st.integers(0, 4))),
            table=draw(tables((n_nodes + 1) * unit)),
            workers=owner.count(i) * unit,
            transition=draw(transitions()),
        )
        for i in range(m)
    )
    returning = tuple(f"r{j}" for j in range(draw(st.integers(0, 2))))
    return ClusterState(PlanningProblem(tasks, n_nodes, D_RUNNING, unit_size=unit), placement, returning)
