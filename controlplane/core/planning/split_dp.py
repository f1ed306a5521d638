"""The DP split around one task: the plans of many events of one cluster state for the price of a few DPs.

Every likely next event (docs/ARCHITECTURE.md §7.4) changes the current problem in one task at most: a
node's loss takes workers from the task it hosts (and a node of capacity), a task's completion removes
it, a node's return adds capacity. Planning each event's problem afresh repeats the whole DP each time:
at 2,048 nodes (16,384 devices, unit 1) with 64 tasks that is some 130 distinct problems of ~0.2 s each.

:class:`SplitDP` runs the DP of the current problem twice, forwards (tasks ``0..i``) and backwards (tasks
``i..T-1``), keeping every table. A problem that differs from the current one in task ``i`` alone, and
in capacity, is then solved by one DP step (task ``i`` as it is after the event, over the forward table
before it) joined to the backward table after it: the best split ``j`` of the budget between the two
sides. Tables are kept up to the largest capacity asked for: a value at budget ``j`` depends on budgets
``≤ j`` alone, so a smaller capacity reads the same tables cut short.

The answer is optimal for the same objective and tie rule as :func:`~controlplane.core.planning.plan`
(maximum Σ G, then fewest moved workers); where several plans tie it may pick another of them.
:meth:`SplitDP.plan` returns None for a problem it cannot derive (two tasks changed, another unit size or
D_running): the caller plans it afresh.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from controlplane.core.planning.planner import (
    Candidate,
    PlannedAllocation,
    PlanningProblem,
    dp_step,
    make_plan,
    task_candidates,
    tie_tolerance,
)


class SplitDP:
    """Forward and backward DP tables of ``base`` at ``capacity_units`` (≥ every capacity asked for)."""

    def __init__(self, base: PlanningProblem, capacity_units: int | None = None) -> None:
        n = base.capacity_units if capacity_units is None else capacity_units
        self.base = base
        self.capacity_units = n
        top = PlanningProblem(base.tasks, n, base.d_running_s, base.unit_size)
        self.cands = [task_candidates(top, t, prune=True) for t in base.tasks]
        self.eps = tie_tolerance(self.cands)
        # forward: fwd_val[i] is the best of tasks 0..i-1 at each budget; fwd_choice[i] is task i's choice
        self.fwd_val, self.fwd_mov, self.fwd_choice = self._tables(self.cands, n)
        # backward: bwd_val[i] is the best of tasks i..T-1; bwd_choice[i] is task i's choice there
        val, mov, choice = self._tables(self.cands[::-1], n)
        self.bwd_val, self.bwd_mov, self.bwd_choice = val[::-1], mov[::-1], choice[::-1]

    def _tables(
        self, cands: Sequence[Sequence[Candidate]], n: int
    ) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
        """The DP over ``cands`` in their order, every table kept: values and moves before each task and
        after the last, and each task's choice at every budget."""
        vals, movs, choices = [np.zeros(n + 1)], [np.zeros(n + 1, dtype=np.int64)], []
        for cs in cands:
            val, mov, choice = dp_step(vals[-1], movs[-1], cs, self.eps)
            vals.append(val)
            movs.append(mov)
            choices.append(choice)
        return vals, movs, choices

    def _variant(self, problem: PlanningProblem) -> tuple[int, bool] | None:
        """Where ``problem`` differs from the base: (task index, removed), (T, False) for no task, or None
        when it is not one task's change at a capacity within the tables."""
        base = self.base
        if (
            problem.unit_size != base.unit_size
            or problem.d_running_s != base.d_running_s
            or problem.capacity_units > self.capacity_units
        ):
            return None
        ours, theirs = base.tasks, problem.tasks
        if len(theirs) == len(ours):
            changed = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
            if not changed:
                return len(ours), False
            if len(changed) == 1 and theirs[changed[0]].task_id == ours[changed[0]].task_id:
                return changed[0], False
            return None
        if len(theirs) == len(ours) - 1:
            i = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), len(theirs))
            if ours[:i] + ours[i + 1 :] == theirs:
                return i, True
        return None

    def plan(self, problem: PlanningProblem) -> PlannedAllocation | None:
        """The optimal plan of ``problem`` from the tables, or None when it is not a one-task variant."""
        where = self._variant(problem)
        if where is None:
            return None
        t0 = time.perf_counter()
        i, removed = where
        n = problem.capacity_units
        tasks = len(self.base.tasks)
        left_val, left_mov = self.fwd_val[i][: n + 1], self.fwd_mov[i][: n + 1]
        own: list[Candidate] = []
        own_choice: np.ndarray | None = None
        if i < tasks and not removed:
            own = task_candidates(problem, problem.tasks[i], prune=True)
            left_val, left_mov, own_choice = dp_step(left_val, left_mov, own, self.eps)
        right = i + 1 if i < tasks else tasks
        right_val = self.bwd_val[right][: n + 1][::-1]
        right_mov = self.bwd_mov[right][: n + 1][::-1]
        total = left_val + right_val
        moves = left_mov + right_mov
        near = total >= total.max() - self.eps
        split = int(np.flatnonzero(near & (moves == moves[near].min()))[-1])
        units = [0] * tasks
        j = split
        if own_choice is not None:
            c = own[int(own_choice[j])]
            units[i] = c.units
            j -= c.cost
        for t in range(i - 1, -1, -1):
            c = self.cands[t][int(self.fwd_choice[t][j])]
            units[t] = c.units
            j -= c.cost
        j = n - split
        for t in range(right, tasks):
            c = self.cands[t][int(self.bwd_choice[t][j])]
            units[t] = c.units
            j -= c.cost
        if removed:
            del units[i]
        return make_plan(problem, units, "dp", time.perf_counter() - t0)


def plan_variants(
    base: PlanningProblem, problems: Sequence[PlanningProblem]
) -> dict[PlanningProblem, PlannedAllocation | None]:
    """Each of ``problems`` planned from one :class:`SplitDP` of ``base`` (None where it is no variant)."""
    if not problems:
        return {}
    split = SplitDP(base, max(base.capacity_units, *(p.capacity_units for p in problems)))
    return {p: split.plan(p) for p in problems}
