"""Heuristic planners for comparison with the DP (docs/ARCHITECTURE.md §7.4-7.5). Same signature as
:func:`plan`.

- :func:`equal_split_plan` — every task gets an equal share of the units, rounded down to a
  feasible count; leftovers go, heaviest task first, to whoever can use them.
- :func:`weight_proportional_plan` — shares proportional to task weight, same rounding.
- :func:`greedy_marginal_plan` — repeatedly give the task with the best gain per unit its next
  useful count, while some move improves the objective.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from controlplane.core.planning.planner import (
    Candidate,
    PlannedAllocation,
    PlanningProblem,
    make_plan,
    task_candidates,
)


def _round_down(cands: Sequence[Candidate], share: int) -> Candidate:
    fitting = [c for c in cands if c.units <= share]
    return max(fitting, key=lambda c: c.units)


def _share_plan(problem: PlanningProblem, shares: Sequence[int], method: str, t0: float) -> PlannedAllocation:
    cands = [task_candidates(problem, t) for t in problem.tasks]
    chosen = [_round_down(cs, s) for cs, s in zip(cands, shares, strict=True)]
    left = problem.capacity_units - sum(c.units for c in chosen)
    order = sorted(range(len(cands)), key=lambda i: -problem.tasks[i].weight)
    for i in order:
        better = _round_down(cands[i], chosen[i].units + left)
        left -= better.units - chosen[i].units
        chosen[i] = better
    return make_plan(problem, [c.units for c in chosen], method, time.perf_counter() - t0)


def equal_split_plan(problem: PlanningProblem) -> PlannedAllocation:
    t0 = time.perf_counter()
    m = len(problem.tasks)
    shares = [problem.capacity_units // m] * m if m else []
    return _share_plan(problem, shares, "equal-split", t0)


def weight_proportional_plan(problem: PlanningProblem) -> PlannedAllocation:
    t0 = time.perf_counter()
    total = sum(t.weight for t in problem.tasks)
    m = len(problem.tasks)
    if total <= 0:  # all weights zero: proportional to nothing, split equally
        shares = [problem.capacity_units // m] * m if m else []
    else:
        shares = [int(problem.capacity_units * t.weight / total) for t in problem.tasks]
    return _share_plan(problem, shares, "weight-proportional", t0)


def greedy_marginal_plan(problem: PlanningProblem) -> PlannedAllocation:
    t0 = time.perf_counter()
    cands = [task_candidates(problem, t) for t in problem.tasks]
    chosen = [cs[0] for cs in cands]  # k = 0
    left = problem.capacity_units
    while True:
        best: tuple[float, int, Candidate] | None = None
        for i, cs in enumerate(cands):
            cur = chosen[i]
            for c in cs:
                if c.units <= cur.units or c.units - cur.units > left:
                    continue
                rate = (c.gain - cur.gain) / (c.units - cur.units)
                if rate > 0 and (best is None or rate > best[0]):
                    best = (rate, i, c)
        if best is None:
            break
        _, i, c = best
        left -= c.units - chosen[i].units
        chosen[i] = c
    return make_plan(problem, [c.units for c in chosen], "greedy-marginal", time.perf_counter() - t0)


HEURISTICS = {
    "equal-split": equal_split_plan,
    "weight-proportional": weight_proportional_plan,
    "greedy-marginal": greedy_marginal_plan,
}
