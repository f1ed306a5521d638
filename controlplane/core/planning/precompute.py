"""Precomputed plans (docs/ARCHITECTURE.md §7.4-7.5): the failure-time decision is a lookup.

API:
- Events: :class:`NodeLost`, :class:`NodeReturned`, :class:`TaskCompleted` (``PlanEvent`` union).
- :class:`ClusterState` — the planning problem plus where each task's workers sit (node → task →
  workers), which nodes may come back and which are suspect (their workers are their tasks' reserve).
- :func:`apply_event` — the planning problem right after an event (pure).
- :class:`PrecomputedPlans` — ``build(state)`` plans every likely next event (each changes the problem in
  one task at most: all are read from one split DP, :mod:`~controlplane.core.planning.split_dp`);
  ``lookup(event)`` is a dict access; ``decide(event)`` falls back to a fresh DP for an unforeseen event;
  ``refresh(state)`` rebuilds for a new state, reusing every plan whose derived problem did not change
  (problems are hashable values, so nodes hosting the same workers share one plan, and a change to one
  task only re-plans the events whose problem it alters).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from controlplane.core.planning.planner import PlannedAllocation, PlanningProblem, plan
from controlplane.core.planning.split_dp import plan_variants


@dataclass(frozen=True, slots=True)
class NodeLost:
    node: str


@dataclass(frozen=True, slots=True)
class NodeReturned:
    node: str


@dataclass(frozen=True, slots=True)
class TaskCompleted:
    task_id: str


PlanEvent = NodeLost | NodeReturned | TaskCompleted


@dataclass(frozen=True)
class ClusterState:
    """The current planning problem and the placement the events act on."""

    problem: PlanningProblem
    placement: Mapping[str, Mapping[str, int]]
    """node -> {task_id: workers on that node}; every usable node appears (idle ones with {}), and every
    suspect node where a task holds workers."""
    returning_nodes: tuple[str, ...] = ()
    """Nodes out of service that may come back (under repair, drained)."""
    units_per_node: int = 1
    suspect_nodes: tuple[str, ...] = ()
    """Nodes of ``placement`` that are suspect: their workers are reserved (``TaskState.reserved``) and
    their devices are no part of ``capacity_units``. Their loss is the likeliest next event."""

    def __post_init__(self) -> None:
        frozen = {n: MappingProxyType(dict(m)) for n, m in self.placement.items()}
        object.__setattr__(self, "placement", MappingProxyType(frozen))

    def likely_events(self) -> list[PlanEvent]:
        """Each node's loss, each returning node's return, each task's completion."""
        events: list[PlanEvent] = [NodeLost(n) for n in sorted(self.placement)]
        events += [NodeReturned(n) for n in self.returning_nodes]
        events += [TaskCompleted(t.task_id) for t in self.problem.tasks]
        return events


def apply_event(state: ClusterState, event: PlanEvent) -> PlanningProblem:
    """The problem to solve right after ``event`` (workers on a lost node are gone and their tasks
    marked hit; a returned node adds capacity; a completed task leaves and frees its workers). A
    suspect node's loss takes its tasks' reserved workers, not shared capacity (it had none in it)."""
    p = state.problem
    match event:
        case NodeLost(node):
            lost = state.placement.get(node, {})
            suspect = node in state.suspect_nodes
            tasks = tuple(
                replace(
                    t,
                    workers=max(t.workers - lost[t.task_id], 0),
                    reserved=max(t.reserved - lost[t.task_id], 0) if suspect else t.reserved,
                    hit=True,
                )
                if lost.get(t.task_id, 0) > 0
                else t
                for t in p.tasks
            )
            capacity = p.capacity_units if suspect else max(p.capacity_units - state.units_per_node, 0)
            return replace(p, tasks=tasks, capacity_units=capacity)
        case NodeReturned():
            return replace(p, capacity_units=p.capacity_units + state.units_per_node)
        case TaskCompleted(task_id):
            return replace(p, tasks=tuple(t for t in p.tasks if t.task_id != task_id))


@dataclass
class PrecomputedPlans:
    """Plans for the likely next events of one :class:`ClusterState`."""

    state: ClusterState
    plans: dict[PlanEvent, PlannedAllocation] = field(default_factory=dict)
    planner: Callable[[PlanningProblem], PlannedAllocation] = plan
    _by_problem: dict[PlanningProblem, PlannedAllocation] = field(default_factory=dict, repr=False)
    build_time_s: float = 0.0
    reused: int = 0
    """Plans taken from the previous state's cache at the last build/refresh."""
    split: int = 0
    """Plans read from one :class:`~controlplane.core.planning.split_dp.SplitDP` of the state's problem (the
    others were reused, or planned afresh: not one task's change, or a planner other than the DP)."""

    @classmethod
    def build(
        cls,
        state: ClusterState,
        events: Iterable[PlanEvent] | None = None,
        planner: Callable[[PlanningProblem], PlannedAllocation] = plan,
        cache: Mapping[PlanningProblem, PlannedAllocation] | None = None,
    ) -> PrecomputedPlans:
        t0 = time.perf_counter()
        out = cls(state, planner=planner)
        old = dict(cache or {})
        problems = {
            ev: apply_event(state, ev) for ev in (state.likely_events() if events is None else events)
        }
        todo = [p for p in dict.fromkeys(problems.values()) if p not in old]
        split: dict[PlanningProblem, PlannedAllocation | None] = {}
        if planner is plan and len(todo) > 1:
            split = plan_variants(state.problem, todo)  # a few DPs for all: each differs in one task
        for ev, prob in problems.items():
            got = out._by_problem.get(prob)
            if got is None:
                got = old.get(prob)
                if got is not None:
                    out.reused += 1
                elif (got := split.get(prob)) is not None:
                    out.split += 1
                else:
                    got = planner(prob)
                out._by_problem[prob] = got
            out.plans[ev] = got
        out.build_time_s = time.perf_counter() - t0
        return out

    @property
    def by_problem(self) -> Mapping[PlanningProblem, PlannedAllocation]:
        """Each distinct problem of the events with its plan."""
        return MappingProxyType(self._by_problem)

    def lookup(self, event: PlanEvent) -> PlannedAllocation | None:
        """The precomputed plan for ``event``, or None when it was not foreseen."""
        return self.plans.get(event)

    def decide(self, event: PlanEvent) -> PlannedAllocation:
        """Lookup, falling back to a fresh DP for an unforeseen event."""
        got = self.plans.get(event)
        return got if got is not None else self.planner(apply_event(self.state, event))

    def refresh(self, state: ClusterState, events: Iterable[PlanEvent] | None = None) -> PrecomputedPlans:
        """Precompute for a new state, re-planning only events whose derived problem changed."""
        return PrecomputedPlans.build(state, events, self.planner, cache=self._by_problem)
