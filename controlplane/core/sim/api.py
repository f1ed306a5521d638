"""One call for a job or a script: `simulate(SimulationRequest) -> SimulationReport`.

A Celery job ("what if this cluster met that trace") wraps this: it loads the live nodes and tasks,
builds a `SimulationRequest`, calls `simulate`, and stores `report.to_dict()` / `report.markdown()`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from controlplane.core.planning import PlanningProblem, TaskState, plan
from controlplane.core.sim.baselines import (
    ELASTIC_BASELINES,
    CheckpointRestart,
    CheckpointRestartParams,
    ElasticBaseline,
)
from controlplane.core.sim.engine import SimResult, Simulator
from controlplane.core.sim.model import GPT3_MODELS, Cause, ClusterSpec, SimTask
from controlplane.core.sim.ours import (
    LatencyProfile,
    OursOptions,
    PlannerThroughput,
    Unicron,
    load_latency_profile,
)
from controlplane.core.sim.policy import Policy
from controlplane.core.sim.trace import NAMED_TRACES, Trace

BASELINE = "checkpoint-restart"
MAIN_POLICIES = ("unicron", "checkpoint-restart", "oobleck", "varuna", "bamboo")
ABLATIONS = ("ours-no-precompute", "ours-no-partial-reuse", "ours-single-task-greedy")
ALL_POLICIES = MAIN_POLICIES + ABLATIONS


def paper_tasks() -> tuple[SimTask, ...]:
    """The paper-setting task mix: five GPT-3-class tasks on 16 nodes (128 GPUs), sizes summing to 16.

    ASSUMPTION: the paper's exact mix is not public in machine-readable form; weights differ so the
    plan matters (a weight is the owner's priority: WAF counts weight x FLOP/s). Each task may grow
    to twice its submitted size: WAF is nearly linear in workers, so without a cap the optimum gives
    the whole cluster to the heaviest task, which no cluster owner would accept.
    """
    m = GPT3_MODELS
    return (
        SimTask("gpt3-1.3b", m["gpt3-1.3b"], weight=1.0, nodes=2, max_nodes=4),
        SimTask("gpt3-2.7b", m["gpt3-2.7b"], weight=1.5, nodes=2, max_nodes=4),
        SimTask("gpt3-6.7b-a", m["gpt3-6.7b"], weight=2.0, nodes=4, max_nodes=8),
        SimTask("gpt3-13b", m["gpt3-13b"], weight=1.2, nodes=4, max_nodes=8),
        SimTask("gpt3-6.7b-b", m["gpt3-6.7b"], weight=0.8, nodes=4, max_nodes=8),
    )


@dataclass(frozen=True)
class SimulationRequest:
    cluster: ClusterSpec
    tasks: tuple[SimTask, ...]
    #: an explicit trace, or the name of a generated one (`NAMED_TRACES`)
    trace: Trace | str = "trace-a"
    seed: int | None = None  # re-seed a named trace
    duration_s: float | None = None  # override a named trace's length
    policies: tuple[str, ...] = MAIN_POLICIES
    #: initial sizes of the static baselines: "planner" (the DP's initial plan, isolates failure
    #: handling) or "requested" (each task's submitted size)
    baseline_sizes: str = "planner"
    latency: LatencyProfile | None = None  # None: load bench/results/detection.json or defaults
    check_invariants: bool = True


@dataclass(frozen=True)
class PolicyOutcome:
    result: SimResult
    wall_s: float


@dataclass(frozen=True)
class SimulationReport:
    request: SimulationRequest
    trace: Trace
    outcomes: dict[str, PolicyOutcome]
    latency_source: str
    initial_sizes: dict[str, int]
    wall_s: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    def ratio(self, policy: str, baseline: str = BASELINE) -> float | None:
        if policy not in self.outcomes or baseline not in self.outcomes:
            return None
        base = self.outcomes[baseline].result.accumulated_waf
        return self.outcomes[policy].result.accumulated_waf / base if base > 0 else None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready summary (what a job stores for the dashboard)."""
        out: dict[str, object] = {
            "cluster": {
                "nodes": self.request.cluster.nodes,
                "gpus_per_node": self.request.cluster.gpus_per_node,
            },
            "trace": {
                "name": self.trace.name,
                "failures": self.trace.count,
                "duration_s": self.trace.duration_s,
            },
            "latency_source": self.latency_source,
            "initial_sizes": self.initial_sizes,
            "wall_s": self.wall_s,
            "policies": {},
        }
        pol: dict[str, object] = {}
        for name, o in self.outcomes.items():
            r = o.result
            pol[name] = {
                "accumulated_waf": r.accumulated_waf,
                "mean_waf": r.mean_waf,
                "ratio_to_checkpoint_restart": self.ratio(name),
                "lost_work_flops": r.lost_work_flops,
                "downtime_task_h": {c.value: s / 3600 for c, s in r.downtime.task_s.items()},
                "lost_waf_by_cause": {c.value: v for c, v in r.downtime.lost_waf.items()},
                "plan_calls": r.plan_calls,
                "wall_s": o.wall_s,
                "curve": r.accumulated_curve(100),
            }
        out["policies"] = pol
        return out


def _initial_sizes(cluster: ClusterSpec, tasks: Sequence[SimTask], tp: PlannerThroughput) -> dict[int, int]:
    """The DP's plan for the tasks present at time 0 (what ours starts with)."""
    g = cluster.gpus_per_node
    present = [i for i, t in enumerate(tasks) if t.arrival_s == 0]
    problem = PlanningProblem(
        tasks=tuple(
            TaskState(str(i), tasks[i].weight, tp.tables[i], max_workers=tp.max_nodes[i] * g) for i in present
        ),
        capacity_units=cluster.nodes,
        d_running_s=86_400.0,
        unit_size=g,
    )
    return {int(a.task_id): a.new_workers // g for a in plan(problem).tasks}


def build_policy(
    name: str,
    tp: PlannerThroughput,
    latency: LatencyProfile,
    sizes: dict[int, int] | None,
    max_nodes: Sequence[int],
) -> Policy:
    if name == "unicron":
        return Unicron(tp, latency, OursOptions(), max_nodes)
    if name == "ours-no-precompute":
        return Unicron(tp, latency, OursOptions(name=name, precomputed=False), max_nodes)
    if name == "ours-no-partial-reuse":
        return Unicron(tp, latency, OursOptions(name=name, partial_reuse=False), max_nodes)
    if name == "ours-single-task-greedy":
        from controlplane.core.planning import greedy_marginal_plan

        return Unicron(
            tp, latency, OursOptions(name=name, planner=greedy_marginal_plan, scope="hit-task"), max_nodes
        )
    if name == BASELINE:
        return CheckpointRestart(CheckpointRestartParams(), sizes)
    if name in ELASTIC_BASELINES:
        return ElasticBaseline(ELASTIC_BASELINES[name], sizes)
    raise ValueError(f"unknown policy {name!r}; known: {', '.join(ALL_POLICIES)}")


def resolve_trace(request: SimulationRequest) -> Trace:
    if isinstance(request.trace, Trace):
        return request.trace
    if request.trace not in NAMED_TRACES:
        raise ValueError(f"unknown trace {request.trace!r}; known: {', '.join(NAMED_TRACES)}")
    named = NAMED_TRACES[request.trace]
    if request.seed is not None or request.duration_s is not None:
        from dataclasses import replace

        named = replace(
            named,
            seed=named.seed if request.seed is None else request.seed,
            duration_s=named.duration_s if request.duration_s is None else request.duration_s,
        )
    return named.build(request.cluster.nodes, request.cluster.gpus_per_node)


def simulate(
    request: SimulationRequest, progress: Callable[[str, float], None] | None = None
) -> SimulationReport:
    """Run every requested policy on the same trace; deterministic for the same request."""
    t0 = time.perf_counter()
    trace = resolve_trace(request)
    cluster = request.cluster
    max_nodes = [min(t.max_nodes or cluster.nodes, cluster.nodes) for t in request.tasks]
    tp = PlannerThroughput(cluster, request.tasks, max_nodes)
    latency = request.latency or load_latency_profile()
    planned = _initial_sizes(cluster, request.tasks, tp)
    if request.baseline_sizes == "planner":
        sizes = dict(planned)
        sizes.update({i: t.nodes for i, t in enumerate(request.tasks) if i not in sizes})  # late arrivals
    elif request.baseline_sizes == "requested":
        sizes = {i: t.nodes for i, t in enumerate(request.tasks)}
    else:
        raise ValueError("baseline_sizes must be 'planner' or 'requested'")
    outcomes: dict[str, PolicyOutcome] = {}
    for name in request.policies:
        policy = build_policy(name, tp, latency, sizes, max_nodes)
        cb = (lambda f, n=name: progress(n, f)) if progress is not None else None
        t1 = time.perf_counter()
        result = Simulator(
            cluster, request.tasks, tp, trace, policy, check_invariants=request.check_invariants, progress=cb
        ).run()
        outcomes[name] = PolicyOutcome(result, time.perf_counter() - t1)
    notes = []
    if request.baseline_sizes == "planner":
        notes.append("static baselines start from the same DP plan as ours (isolates failure handling)")
    return SimulationReport(
        request=request,
        trace=trace,
        outcomes=outcomes,
        latency_source=latency.source,
        initial_sizes={request.tasks[i].name: n for i, n in sizes.items()},
        wall_s=time.perf_counter() - t0,
        notes=tuple(notes),
    )


__all__ = [
    "ABLATIONS",
    "ALL_POLICIES",
    "BASELINE",
    "MAIN_POLICIES",
    "Cause",
    "PolicyOutcome",
    "SimulationReport",
    "SimulationRequest",
    "build_policy",
    "paper_tasks",
    "resolve_trace",
    "simulate",
]
