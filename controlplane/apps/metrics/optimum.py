"""The healthy-cluster optimum: the planner's best cluster WAF if every registered, non-quarantined node
were healthy (the reference line of the overview's WAF chart, docs/ARCHITECTURE.md §7.3).

The problem is the coordinator's own (``planning.selectors.build_planning_problem(healthy=True)``): the
same tasks (pending, running, reconfiguring, suspended), throughput tables with the efficiency factors
the workload manager calibrated from the workers' measured iteration times, on every device of the
planning kind of every non-quarantined node, whatever its state (a lost node counts as healthy; an
operator's quarantine is a decision, not a failure). Every task starts from zero workers and is not
hit, so there is no transition penalty and the DP maximises Σ F: the best steady state, not the best
next move. The chart's optimum and the plans' expected WAF are therefore in the same units.

The plan is memoised on the (hashable) problem: it changes only when tasks, weights, nodes or the
calibration change, and the sampler asks every few seconds.
"""

from __future__ import annotations

from functools import lru_cache

from controlplane.apps.planning.selectors import build_planning_problem
from controlplane.core.planning import PlanningProblem, plan


@lru_cache(maxsize=32)
def best_waf(problem: PlanningProblem) -> float:
    """Σ F of the DP's plan for ``problem`` (pure; memoised)."""
    if not problem.tasks or problem.capacity_units <= 0:
        return 0.0
    return plan(problem).expected_waf


def get_healthy_cluster_optimum() -> float:
    """The healthy-cluster optimum WAF (FLOP/s) right now."""
    return best_waf(build_planning_problem(healthy=True))
