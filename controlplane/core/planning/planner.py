"""The planner (docs/ARCHITECTURE.md §7.4-7.5): a dynamic program over allocation units and feasible counts.

API:
- :class:`TaskState` — one task as the planner sees it (weight, throughput table, current workers,
  whether the event hit it, bounds, transition model).
- :class:`PlanningProblem` — tasks, capacity in allocation units, workers per unit, D_running.
- :func:`plan` — the optimal plan (the DP); :func:`brute_force_plan` — exhaustive reference for
  small instances. Both return a :class:`PlannedAllocation` of :class:`TaskAssignment` rows with an
  explanation.
- :func:`task_candidates` — G(t, k) at every feasible count k (shared with the heuristics).

Objective: maximise Σ G(t_i, x'_i) subject to Σ x'_i ≤ capacity; among (near-)equal optima prefer
the plan that moves fewer workers (Σ |x'_i - x_i|), then the one using fewer units. The DP is
``S[i][j] = max_k S[i-1][j-c(k)] + G(t_i, k)`` over k ∈ {0} + feasible counts (in units); the inner
loop is vectorised over j with numpy (the only reason numpy is used: 64 tasks x ~150 feasible counts
x 2,049 capacities is 20 M pure-Python steps, too slow for the 2 s target). Counts k dominated by a
smaller count (no more gain, no fewer moves) are dropped first: with Σ ≤ capacity, S[i-1] is
non-decreasing in j, so a dominated k can never be strictly better.

Reserved workers: a task may hold devices that only it can use (``TaskState.reserved``: devices on a
node that is suspect, not yet lost — it may be a short blip, so the task keeps them, but nobody else is
placed there). They count against no shared capacity: count k costs ``c(k) = ⌈max(k·u - reserved, 0) /
u⌉`` units of ``capacity_units`` (the healthy devices), ``c(k) = k`` for a task without reserved
workers. A task that shrinks below its reservation leaves the rest idle rather than giving it away.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from itertools import product

import numpy as np

from controlplane.core.planning.throughput import MegatronConfig, ThroughputTable
from controlplane.core.planning.waf import TransitionModel, gain, waf

TIE_RELATIVE_TOLERANCE = 1e-9
"""Objectives within this fraction of the problem's gain scale count as ties (float summation order
differs between plans that are mathematically equal)."""


def _field_values(obj: TaskState | PlanningProblem) -> tuple[object, ...]:
    """A value's constructor arguments, in order: what equality compares and the cached hash covers (the
    cache itself is no argument)."""
    return tuple(getattr(obj, f.name) for f in fields(obj) if f.init)


@dataclass(frozen=True, slots=True)
class TaskState:
    """A task as the planner sees it. ``workers`` is what it holds now (after the event)."""

    task_id: str
    weight: float
    table: ThroughputTable
    workers: int = 0
    hit: bool = False
    """The event took workers from this task (or otherwise forces it to restart)."""
    min_workers: int = 0
    max_workers: int | None = None
    transition: TransitionModel = field(default_factory=TransitionModel)
    reserved: int = 0
    """Of ``workers``, those on devices only this task may use (its devices on a suspect node): they take
    no shared capacity, and are not given to another task while the node may still come back."""
    _hash: int = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(_field_values(self)))
        if self.weight < 0:
            raise ValueError(f"task {self.task_id}: weight must be >= 0")
        if self.workers < 0 or self.min_workers < 0:
            raise ValueError(f"task {self.task_id}: worker counts must be >= 0")
        if not 0 <= self.reserved <= self.workers:
            raise ValueError(f"task {self.task_id}: reserved must be within 0..workers")

    def __hash__(self) -> int:  # cached: problems (tuples of tasks) are dict keys of the precomputed plans
        return self._hash

    def __reduce__(self) -> tuple[type[TaskState], tuple[object, ...]]:
        # rebuilt by the constructor: the cached hash is of this process's string hashing, not another's
        return (type(self), _field_values(self))

    def shared_units(self, workers: int, unit_size: int) -> int:
        """Units of shared capacity that ``workers`` workers take (its reserved ones take none)."""
        return -(-max(workers - self.reserved, 0) // unit_size)


@dataclass(frozen=True, slots=True)
class PlanningProblem:
    """Choose x'_i for every task with Σ x'_i ≤ capacity_units · unit_size (workers a task holds in
    reserve, ``TaskState.reserved``, are not counted against ``capacity_units``)."""

    tasks: tuple[TaskState, ...]
    capacity_units: int
    d_running_s: float
    unit_size: int = 8
    """Workers per allocation unit (a node of 8 GPUs by default; 1 for single devices)."""
    _hash: int = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(_field_values(self)))
        if self.capacity_units < 0 or self.unit_size < 1 or self.d_running_s < 0:
            raise ValueError("capacity_units >= 0, unit_size >= 1 and d_running_s >= 0 required")
        ids = [t.task_id for t in self.tasks]
        if len(set(ids)) != len(ids):
            raise ValueError("task ids must be unique")

    def __hash__(self) -> int:  # cached: every precomputed plan is keyed by its problem
        return self._hash

    def __reduce__(self) -> tuple[type[PlanningProblem], tuple[object, ...]]:
        # rebuilt by the constructor: the cached hash is of this process's string hashing, not another's
        return (type(self), _field_values(self))

    @property
    def capacity_workers(self) -> int:
        return self.capacity_units * self.unit_size

    def task(self, task_id: str) -> TaskState:
        for t in self.tasks:
            if t.task_id == task_id:
                return t
        raise KeyError(task_id)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One option for one task: ``units`` allocation units and what it is worth."""

    units: int
    workers: int
    gain: float
    penalty: float
    moved: int
    cost: int
    """Units of shared capacity it takes: ``units`` less the task's reserved ones."""


@dataclass(frozen=True, slots=True)
class TaskAssignment:
    task_id: str
    old_workers: int
    new_workers: int
    config: MegatronConfig | None
    waf: float
    """F(t, x'): weighted achieved FLOP/s on the new count."""
    gain: float
    transition_penalty: float
    """F(t, x)·D_transition, in weighted FLOPs (0 when the task is untouched)."""
    marginal_waf_up: float | None
    """WAF per extra unit if the task got its next feasible count (None: no larger count fits)."""
    marginal_waf_down: float | None
    """WAF lost per unit if the task dropped to its next smaller feasible count (or 0)."""

    @property
    def changed(self) -> bool:
        return self.new_workers != self.old_workers


@dataclass(frozen=True, slots=True)
class PlannedAllocation:
    """The planner's answer: every task's worker count and config, the objective and its explanation (the
    ``planning.Plan`` row records one)."""

    method: str
    tasks: tuple[TaskAssignment, ...]
    objective: float
    """Σ G: expected weighted FLOPs over D_running, net of transition costs."""
    expected_waf: float
    """Σ F(t, x'): cluster WAF once the plan is in place (FLOP/s)."""
    transition_cost: float
    """Σ of transition penalties (weighted FLOPs)."""
    moved_workers: int
    capacity_units: int
    unit_size: int
    d_running_s: float
    compute_time_s: float = 0.0
    reserved_workers: int = 0
    """Workers the tasks held in reserve (on suspect nodes), usable by their own task only."""

    @property
    def new_counts(self) -> dict[str, int]:
        return {a.task_id: a.new_workers for a in self.tasks}

    @property
    def used_workers(self) -> int:
        return sum(a.new_workers for a in self.tasks)

    def assignment(self, task_id: str) -> TaskAssignment:
        for a in self.tasks:
            if a.task_id == task_id:
                return a
        raise KeyError(task_id)

    def explain(self) -> str:
        """A human-readable account: what changes, why, and the marginal value of a unit per task."""
        cap = self.capacity_units * self.unit_size + self.reserved_workers
        lines = [
            f"{self.method}: {self.used_workers}/{cap} workers used, expected WAF "
            f"{self.expected_waf / 1e12:.2f} TFLOP/s over D_running={self.d_running_s:.0f}s, "
            f"transition cost {self.transition_cost / 1e12:.2f} weighted TFLOP, "
            f"moved {self.moved_workers} workers",
        ]
        for a in self.tasks:
            cfg = (
                f"tp={a.config.tp} pp={a.config.pp} dp={a.config.dp} mb={a.config.micro_batch}"
                f"{' recompute' if a.config.recompute else ''}"
                if a.config
                else "-"
            )
            up = f"{a.marginal_waf_up / 1e12:.3f}" if a.marginal_waf_up is not None else "n/a"
            down = f"{a.marginal_waf_down / 1e12:.3f}" if a.marginal_waf_down is not None else "n/a"
            lines.append(
                f"  {a.task_id}: {a.old_workers} -> {a.new_workers} workers [{cfg}], WAF "
                f"{a.waf / 1e12:.2f} TFLOP/s; marginal WAF per unit: +1 unit {up}, -1 unit {down} TFLOP/s"
            )
        return "\n".join(lines)


def task_candidates(problem: PlanningProblem, task: TaskState, *, prune: bool = False) -> list[Candidate]:
    """G(t, k) for k = 0 and every feasible count k·unit_size within capacity and the task's bounds.

    With ``prune``, drop counts dominated by a smaller one (gain no higher, moves no fewer).
    """
    u = problem.unit_size
    ks = [0]
    for x in task.table.feasible_counts:
        if x % u or task.shared_units(x, u) > problem.capacity_units or x < task.min_workers:
            continue
        if task.max_workers is not None and x > task.max_workers:
            continue
        if x > 0:
            ks.append(x // u)
    out: list[Candidate] = []
    for k in ks:
        g, pen = gain(
            weight=task.weight,
            table=task.table,
            old_workers=task.workers,
            new_workers=k * u,
            hit=task.hit,
            d_running_s=problem.d_running_s,
            transition=task.transition,
            min_workers=task.min_workers,
            max_workers=task.max_workers,
        )
        out.append(Candidate(k, k * u, g, pen, abs(k * u - task.workers), task.shared_units(k * u, u)))
    if not prune:
        return out
    eps = TIE_RELATIVE_TOLERANCE * max(1.0, max(abs(c.gain) for c in out))
    kept: list[Candidate] = []
    for c in out:
        if not kept:
            kept.append(c)
            continue
        best_g = max(k.gain for k in kept)
        if c.gain > best_g + eps or all(c.moved < k.moved for k in kept if k.gain >= c.gain - eps):
            kept.append(c)
    return kept


def _marginals(problem: PlanningProblem, task: TaskState, workers: int) -> tuple[float | None, float | None]:
    u = problem.unit_size
    counts = [
        x
        for x in task.table.feasible_counts
        if x % u == 0 and x >= task.min_workers and (task.max_workers is None or x <= task.max_workers)
    ]
    f = waf(task.weight, task.table, workers, task.min_workers, task.max_workers)
    up_counts = [x for x in counts if x > workers and task.shared_units(x, u) <= problem.capacity_units]
    down_counts = [x for x in counts if x < workers] or [0]
    up = None
    if up_counts:
        x = up_counts[0]
        up = (waf(task.weight, task.table, x, task.min_workers, task.max_workers) - f) / ((x - workers) / u)
    down = None
    if workers > 0:
        x = down_counts[-1]
        down = (f - waf(task.weight, task.table, x, task.min_workers, task.max_workers)) / ((workers - x) / u)
    return up, down


def make_plan(
    problem: PlanningProblem, units: Sequence[int], method: str, elapsed_s: float = 0.0
) -> PlannedAllocation:
    """Assemble a :class:`PlannedAllocation` from per-task unit counts (in problem.tasks order)."""
    rows: list[TaskAssignment] = []
    objective = expected = cost = 0.0
    moved = 0
    for task, k in zip(problem.tasks, units, strict=True):
        x = k * problem.unit_size
        g, pen = gain(
            weight=task.weight,
            table=task.table,
            old_workers=task.workers,
            new_workers=x,
            hit=task.hit,
            d_running_s=problem.d_running_s,
            transition=task.transition,
            min_workers=task.min_workers,
            max_workers=task.max_workers,
        )
        f = waf(task.weight, task.table, x, task.min_workers, task.max_workers)
        up, down = _marginals(problem, task, x)
        rows.append(
            TaskAssignment(task.task_id, task.workers, x, task.table.best_config(x), f, g, pen, up, down)
        )
        objective += g
        expected += f
        cost += pen
        moved += abs(x - task.workers)
    return PlannedAllocation(
        method,
        tuple(rows),
        objective,
        expected,
        cost,
        moved,
        problem.capacity_units,
        problem.unit_size,
        problem.d_running_s,
        elapsed_s,
        sum(t.reserved for t in problem.tasks),
    )


def tie_tolerance(cands: Sequence[Sequence[Candidate]]) -> float:
    """The objective difference under which two plans tie (a fraction of the problem's gain scale)."""
    scale = sum(max(abs(c.gain) for c in cs) for cs in cands) if cands else 0.0
    return TIE_RELATIVE_TOLERANCE * max(scale, 1.0)


def dp_step(
    val: np.ndarray, mov: np.ndarray, cands: Sequence[Candidate], eps: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One task's step of the DP: ``S[j] = max_k S_prev[j - c(k)] + G(k)`` over every budget ``j`` (the
    arrays' length), ties to fewer moved workers. Returns the new values, moves and the candidate chosen
    at each budget (an index into ``cands``)."""
    n = len(val) - 1
    new_val = np.full(n + 1, -np.inf)
    new_mov = np.zeros(n + 1, dtype=np.int64)
    choice = np.zeros(n + 1, dtype=np.int32)
    for idx, c in enumerate(cands):
        k = c.cost  # shared units: a task's reserved workers take none
        if k > n:
            continue
        cand_val = val[: n + 1 - k] + c.gain
        cand_mov = mov[: n + 1 - k] + c.moved
        cur_val = new_val[k:]
        cur_mov = new_mov[k:]
        better = (cand_val > cur_val + eps) | ((cand_val >= cur_val - eps) & (cand_mov < cur_mov))
        new_val[k:] = np.where(better, cand_val, cur_val)
        new_mov[k:] = np.where(better, cand_mov, cur_mov)
        choice[k:] = np.where(better, idx, choice[k:])
    return new_val, new_mov, choice


def plan(problem: PlanningProblem) -> PlannedAllocation:
    """The optimal plan by dynamic programming (§6.3), ties to fewer moved workers."""
    t0 = time.perf_counter()
    n = problem.capacity_units
    cands = [task_candidates(problem, t, prune=True) for t in problem.tasks]
    eps = tie_tolerance(cands)
    val = np.zeros(n + 1)
    mov = np.zeros(n + 1, dtype=np.int64)
    choices: list[np.ndarray] = []
    for cs in cands:
        val, mov, choice = dp_step(val, mov, cs, eps)
        choices.append(choice)
    units = [0] * len(cands)
    j = n
    for i in range(len(cands) - 1, -1, -1):
        c = cands[i][int(choices[i][j])]
        units[i] = c.units
        j -= c.cost
    return make_plan(problem, units, "dp", time.perf_counter() - t0)


def brute_force_plan(problem: PlanningProblem) -> PlannedAllocation:
    """Exhaustive search over every combination of candidate counts (small instances only).

    Same objective and tie rule as :func:`plan`: maximum Σ G, then fewest moved workers, then fewest
    units of shared capacity.
    """
    t0 = time.perf_counter()
    cands = [task_candidates(problem, t) for t in problem.tasks]
    eps = tie_tolerance(cands)
    combos = [combo for combo in product(*cands) if sum(c.cost for c in combo) <= problem.capacity_units]
    best_val = max(sum(c.gain for c in combo) for combo in combos)
    near = [combo for combo in combos if sum(c.gain for c in combo) >= best_val - eps]
    best = min(near, key=lambda combo: (sum(c.moved for c in combo), sum(c.cost for c in combo)))
    return make_plan(problem, [c.units for c in best], "brute-force", time.perf_counter() - t0)
