"""Experiments in the shape of the paper's evaluation (§7 of He et al.).

Each returns plain dataclasses/dicts; `report.py` turns them into Markdown and PNG.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from controlplane.core.planning import HEURISTICS, PlanningProblem, TaskState, plan
from controlplane.core.sim.api import (
    ALL_POLICIES,
    BASELINE,
    MAIN_POLICIES,
    SimulationReport,
    SimulationRequest,
    paper_tasks,
    simulate,
)
from controlplane.core.sim.model import GPT3_MODELS, ClusterSpec, SimTask
from controlplane.core.sim.ours import PlannerThroughput
from controlplane.core.sim.trace import ANT, DAY_S, LLAMA3, NAMED_TRACES, NamedTrace

Progress = Callable[[str, float], None]

PAPER_CLUSTER = ClusterSpec(nodes=16, gpus_per_node=8)


# --------------------------------------------------------------------------------------------------
# 1. Multi-task plan quality vs heuristics
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanQualityRow:
    nodes: int
    tasks: int
    instances: int
    #: heuristic -> (mean, min) of WAF(DP) / WAF(heuristic) over the instances
    ratios: dict[str, tuple[float, float]]
    dp_ms: float  # mean DP wall time


def random_tasks(rng: random.Random, count: int, nodes: int) -> tuple[SimTask, ...]:
    names = list(GPT3_MODELS)[:4]
    out = []
    for i in range(count):
        model = GPT3_MODELS[rng.choice(names)]
        size = max(1, nodes // count)
        out.append(
            SimTask(
                f"t{i}-{model.name}",
                model,
                weight=round(rng.uniform(0.5, 2.0), 2),
                nodes=size,
                max_nodes=max(1, 2 * size),
            )
        )
    return tuple(out)


def plan_quality(
    settings: tuple[tuple[int, int], ...] = ((16, 4), (16, 8), (128, 8), (128, 16), (512, 32)),
    instances: int = 20,
    seed: int = 0,
) -> list[PlanQualityRow]:
    """WAF of the DP's plan over each heuristic's, on random GPT-3 mixes (fresh cluster)."""
    rows = []
    for nodes, count in settings:
        rng = random.Random(f"plan-quality/{seed}/{nodes}/{count}")
        cluster = ClusterSpec(nodes)
        ratios: dict[str, list[float]] = {h: [] for h in HEURISTICS}
        dp_times = []
        for _ in range(instances):
            tasks = random_tasks(rng, count, nodes)
            tp = PlannerThroughput(cluster, tasks, [t.max_nodes or nodes for t in tasks])
            problem = PlanningProblem(
                tasks=tuple(
                    TaskState(str(i), t.weight, tp.tables[i], max_workers=tp.max_nodes[i] * 8)
                    for i, t in enumerate(tasks)
                ),
                capacity_units=nodes,
                d_running_s=DAY_S,
                unit_size=8,
            )
            t0 = time.perf_counter()
            best = plan(problem)
            dp_times.append(time.perf_counter() - t0)
            for name, fn in HEURISTICS.items():
                h = fn(problem).expected_waf
                ratios[name].append(best.expected_waf / h if h > 0 else float("inf"))
        rows.append(
            PlanQualityRow(
                nodes,
                count,
                instances,
                {h: (statistics.fmean(v), min(v)) for h, v in ratios.items()},
                1000 * statistics.fmean(dp_times),
            )
        )
    return rows


# --------------------------------------------------------------------------------------------------
# 2. Trace replay at 128 GPUs
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayResult:
    trace: str
    main: SimulationReport  # the named seed: curves and downtime come from here
    #: policy -> ratio to checkpoint-restart for each seed (named seed first)
    seed_ratios: dict[str, list[float]]
    seeds: tuple[int, ...]
    failures: list[int]


def trace_replay(
    trace: str,
    policies: tuple[str, ...] = ALL_POLICIES,
    extra_seeds: int = 4,
    baseline_sizes: str = "planner",
    progress: Progress | None = None,
) -> ReplayResult:
    named = NAMED_TRACES[trace]
    seeds = (named.seed, *range(100, 100 + extra_seeds))
    ratios: dict[str, list[float]] = {p: [] for p in policies}
    failures = []
    main: SimulationReport | None = None
    for k, seed in enumerate(seeds):
        req = SimulationRequest(
            PAPER_CLUSTER,
            paper_tasks(),
            trace=trace,
            seed=seed,
            policies=policies,
            baseline_sizes=baseline_sizes,
        )
        rep = simulate(req)
        failures.append(rep.trace.count)
        for p in policies:
            ratios[p].append(rep.ratio(p) or 0.0)
        if main is None:
            main = rep
        if progress is not None:
            progress(f"replay {trace}", (k + 1) / len(seeds))
    assert main is not None
    return ReplayResult(trace, main, ratios, seeds, failures)


# --------------------------------------------------------------------------------------------------
# 3. Sensitivity to failure rate and task count
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SensitivityPoint:
    x: float
    failures_per_day: float
    ratios: dict[str, float]  # mean over seeds


def _mean_ratios(reqs: list[SimulationRequest], policies: tuple[str, ...]) -> tuple[dict[str, float], float]:
    acc: dict[str, list[float]] = {p: [] for p in policies}
    fails = []
    for req in reqs:
        rep = simulate(req)
        fails.append(rep.trace.count / (rep.trace.duration_s / DAY_S))
        for p in policies:
            acc[p].append(rep.ratio(p) or 0.0)
    return {p: statistics.fmean(v) for p, v in acc.items()}, statistics.fmean(fails)


def sensitivity_rate(
    multipliers: tuple[float, ...] = (1, 3, 10, 20, 40, 80),
    seeds: int = 3,
    policies: tuple[str, ...] = MAIN_POLICIES,
    progress: Progress | None = None,
) -> list[SensitivityPoint]:
    out = []
    for k, m in enumerate(multipliers):
        reqs = [
            SimulationRequest(
                PAPER_CLUSTER,
                paper_tasks(),
                trace=NamedTrace(f"ant-x{m:g}", ANT.scaled(m), 7 * DAY_S, seed=s).build(16, 8),
                policies=policies,
            )
            for s in range(seeds)
        ]
        ratios, fpd = _mean_ratios(reqs, policies)
        out.append(SensitivityPoint(m, fpd, ratios))
        if progress is not None:
            progress("sensitivity: failure rate", (k + 1) / len(multipliers))
    return out


def tasks_for_count(count: int, nodes: int) -> tuple[SimTask, ...]:
    """`count` GPT-3-class tasks with sizes summing to the cluster, weights cycling 2, 1.5, 1, 0.5."""
    models = list(GPT3_MODELS.values())[:4]
    weights = (2.0, 1.5, 1.0, 0.5)
    base, extra = divmod(nodes, count)
    out = []
    for i in range(count):
        size = base + (1 if i < extra else 0)
        out.append(
            SimTask(
                f"t{i}-{models[i % 4].name}",
                models[i % 4],
                weights[(i // 4 + i) % 4],
                max(size, 1),
                max_nodes=2 * size,
            )
        )
    return tuple(out)


def sensitivity_tasks(
    counts: tuple[int, ...] = (1, 2, 4, 8),
    trace: str = "trace-b",
    seeds: int = 3,
    policies: tuple[str, ...] = MAIN_POLICIES,
    progress: Progress | None = None,
) -> list[SensitivityPoint]:
    out = []
    named = NAMED_TRACES[trace]
    for k, c in enumerate(counts):
        reqs = [
            SimulationRequest(
                PAPER_CLUSTER,
                tasks_for_count(c, PAPER_CLUSTER.nodes),
                trace=replace(named, seed=s).build(16, 8),
                policies=policies,
            )
            for s in range(seeds)
        ]
        ratios, fpd = _mean_ratios(reqs, policies)
        out.append(SensitivityPoint(c, fpd, ratios))
        if progress is not None:
            progress("sensitivity: task count", (k + 1) / len(counts))
    return out


# --------------------------------------------------------------------------------------------------
# 4. A 16,384-GPU cluster
# --------------------------------------------------------------------------------------------------


def large_tasks(nodes: int = 2048, count: int = 64) -> tuple[SimTask, ...]:
    return tasks_for_count(count, nodes)


def large_run(
    nodes: int = 2048,
    tasks: int = 64,
    days: float = 30.0,
    rate_multiplier: float = 1.0,
    policies: tuple[str, ...] = MAIN_POLICIES,
    progress: Progress | None = None,
) -> SimulationReport:
    """16,384 GPUs (2,048 nodes x 8), Llama-3 failure rate and mix, `days` long."""
    cluster = ClusterSpec(nodes)
    profile = LLAMA3 if rate_multiplier == 1 else LLAMA3.scaled(rate_multiplier)
    trace = NamedTrace("llama3-16k", profile, days * DAY_S, seed=1).build(nodes, 8)
    req = SimulationRequest(
        cluster, large_tasks(nodes, tasks), trace=trace, policies=policies, check_invariants=False
    )
    return simulate(req, progress)


__all__ = [
    "BASELINE",
    "PAPER_CLUSTER",
    "PlanQualityRow",
    "ReplayResult",
    "SensitivityPoint",
    "large_run",
    "plan_quality",
    "sensitivity_rate",
    "sensitivity_tasks",
    "trace_replay",
]
