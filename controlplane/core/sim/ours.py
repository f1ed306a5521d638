"""Our policy on the simulator: the planning core's throughput tables, DP planner, transition model
and the failures core's classification, called unchanged; plus its ablations.

Only glue lives here: mapping sim tasks to `GPTSpec`/`TaskState`, failure kinds to `Evidence`, and
a plan's new counts to `Change`s. Latencies come from `LatencyProfile` (measured benchmark results
when present, else the docs/ARCHITECTURE.md §7.1 targets).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from controlplane.core.failures import Evidence, Severity, classify_evidence
from controlplane.core.planning import (
    GPTSpec,
    PlannedAllocation,
    PlanningProblem,
    TaskState,
    ThroughputTable,
    TransitionModel,
    build_throughput_table,
    expected_running_duration_s,
    get_device_kind,
    greedy_marginal_plan,
    plan,
)
from controlplane.core.sim.model import Cause, ClusterSpec, GPTModel, SimTask
from controlplane.core.sim.policy import Change, Decision, Phase, Policy, SimView
from controlplane.core.sim.trace import FailureKind, FailureRecord

# --------------------------------------------------------------------------------------------------
# Throughput from the planning core
# --------------------------------------------------------------------------------------------------


def gpt_spec(model: GPTModel) -> GPTSpec:
    return GPTSpec(
        num_layers=model.layers,
        hidden_size=model.hidden,
        num_attention_heads=model.heads,
        seq_length=model.seq_len,
        vocab_size=model.vocab,
        global_batch_size=model.global_batch,
        micro_batch_size=model.micro_batch,
    )


@lru_cache(maxsize=256)
def _table(model: GPTModel, device_kind: str, max_workers: int, unit: int) -> ThroughputTable:
    return build_throughput_table(gpt_spec(model), get_device_kind(device_kind), max_workers, unit=unit)


class PlannerThroughput:
    """`ThroughputModel` backed by the planning core's `ThroughputTable` (unit = one node).

    A task on n nodes runs on the largest feasible worker count <= n·G that gives the most FLOP/s
    (idle GPUs otherwise): counts where the global batch does not split are infeasible in the table.
    """

    def __init__(
        self, cluster: ClusterSpec, tasks: Sequence[SimTask], max_nodes: Sequence[int] | None = None
    ):
        self.cluster = cluster
        g = cluster.gpus_per_node
        caps = max_nodes or [cluster.nodes] * len(tasks)
        self.tables = [
            _table(t.model, cluster.device_kind, min(cap, cluster.nodes) * g, g)
            for t, cap in zip(tasks, caps, strict=True)
        ]
        self.max_nodes = [min(cap, cluster.nodes) for cap in caps]
        self._best: list[list[tuple[float, int]]] = []
        for table, cap in zip(self.tables, self.max_nodes, strict=True):
            row: list[tuple[float, int]] = [(0.0, 0)]
            for n in range(1, cap + 1):
                f = table.throughput(n * g)
                row.append((f, n) if f > row[-1][0] else row[-1])
            self._best.append(row)

    def flops(self, task: int, nodes: int) -> float:
        row = self._best[task]
        return row[min(nodes, len(row) - 1)][0]

    def used_nodes(self, task: int, nodes: int) -> int:
        row = self._best[task]
        return row[min(nodes, len(row) - 1)][1]

    def min_nodes(self, task: int) -> int:
        x = self.tables[task].x_min
        return math.ceil(x / self.cluster.gpus_per_node) if x is not None else self.cluster.nodes + 1

    def iteration_s(self, task: int, nodes: int) -> float:
        used = self.used_nodes(task, nodes)
        for p in self.tables[task].points:
            if p.workers == used * self.cluster.gpus_per_node and p.iteration_s is not None:
                return p.iteration_s
        return 1.0

    def dp_of(self, task: int, nodes: int) -> int:
        cfg = self.tables[task].best_config(self.used_nodes(task, nodes) * self.cluster.gpus_per_node)
        return cfg.dp if cfg is not None else 1

    def shard_ways(self, task: int, nodes: int) -> int:
        cfg = self.tables[task].best_config(self.used_nodes(task, nodes) * self.cluster.gpus_per_node)
        return cfg.tp * cfg.pp if cfg is not None else 1


# --------------------------------------------------------------------------------------------------
# Latencies
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LatencyProfile:
    """Detection latency per failure kind and the costs of our actions, in seconds.

    Defaults are the docs/ARCHITECTURE.md §7.1 targets (crash/exception <= 1 s, node loss <= 3 s, hang <=
    max(3 x median iteration, 5 s)); `load_latency_profile` replaces them with measured values from
    `bench/results` when a benchmark has written them. `source` says which was used.
    """

    detection_s: Mapping[FailureKind, float] = field(
        default_factory=lambda: {
            FailureKind.NETWORK_TRANSIENT: 1.0,  # exception propagation
            FailureKind.PROCESS_CRASH: 1.0,  # process supervision
            FailureKind.CUDA_ERROR: 1.0,  # exception propagation
            FailureKind.GPU_HARDWARE: 1.0,  # exception propagation (Xid/ECC surfaces as CUDA error)
            FailureKind.NODE_LOSS: 3.0,  # heartbeat (1 s period, 3 missed)
        }
    )
    hang_iterations: float = 3.0  # collective timeout: hang detector at 3 x median iteration...
    hang_floor_s: float = 5.0  # ...but never below 5 s
    #: process restart in place, NCCL re-init, model rebuild with warm caches (TransitionModel default)
    restart_s: float = 30.0
    #: time for a precomputed-plan lookup; a full DP is charged by `dp_decision_s`
    lookup_s: float = 0.001
    source: str = "docs/ARCHITECTURE.md §7.1 targets (no benchmark results found)"

    def detection_for(self, kind: FailureKind, iteration_s: float) -> float:
        if kind is FailureKind.COLLECTIVE_TIMEOUT:
            return max(self.hang_iterations * iteration_s, self.hang_floor_s)
        return self.detection_s[kind]


def load_latency_profile(results_dir: str | Path = "bench/results") -> LatencyProfile:
    """Measured latencies from `bench/results/detection.json` if a benchmark wrote one.

    Accepted shape: {"detection_s": {"<failure kind>": seconds, ...}, "restart_s": seconds} where
    kinds are `FailureKind` values; detectors' names are mapped too (process_exit -> process_crash
    and cuda_error, exception -> network_transient and gpu_hardware, heartbeat -> node_loss).
    Anything missing keeps its default.
    """
    path = Path(results_dir) / "detection.json"
    if not path.is_file():
        return LatencyProfile()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return LatencyProfile()
    if not isinstance(data, dict):
        return LatencyProfile()
    base = LatencyProfile()
    det = dict(base.detection_s)
    alias = {
        "process_exit": (FailureKind.PROCESS_CRASH, FailureKind.CUDA_ERROR),
        "exception": (FailureKind.NETWORK_TRANSIENT, FailureKind.GPU_HARDWARE),
        "heartbeat": (FailureKind.NODE_LOSS,),
    }
    got = data.get("detection_s", {})
    used = []
    if isinstance(got, dict):
        for key, value in got.items():
            if not isinstance(value, int | float) or value < 0:
                continue
            kinds = alias.get(key) or ((FailureKind(key),) if key in FailureKind.__members__.values() else ())
            for k in kinds:
                det[k] = float(value)
                used.append(k.value)
    restart = data.get("restart_s", base.restart_s)
    restart_s = float(restart) if isinstance(restart, int | float) and restart >= 0 else base.restart_s
    return replace(base, detection_s=det, restart_s=restart_s, source=f"{path} ({', '.join(used) or 'none'})")


# --------------------------------------------------------------------------------------------------
# Classification
# --------------------------------------------------------------------------------------------------

# What the agents would report for each kind of failure (docs/ARCHITECTURE.md §7.1 detectors).
EVIDENCE: dict[FailureKind, Evidence] = {
    FailureKind.NETWORK_TRANSIENT: Evidence(
        "exception", exception_type="ConnectionResetError", message="Connection reset by peer"
    ),
    FailureKind.COLLECTIVE_TIMEOUT: Evidence("hang", message="iteration exceeded hang threshold"),
    FailureKind.PROCESS_CRASH: Evidence("process_exit", exit_code=1),
    FailureKind.CUDA_ERROR: Evidence(
        "exception",
        exception_type="RuntimeError",
        message="CUDA error: an illegal memory access was encountered",
    ),
    FailureKind.GPU_HARDWARE: Evidence(
        "exception", exception_type="RuntimeError", message="CUDA error: uncorrectable ECC error encountered"
    ),
    FailureKind.NODE_LOSS: Evidence("heartbeat", message="agent heartbeats stopped"),
}


@lru_cache(maxsize=16)
def severity_of(kind: FailureKind) -> Severity:
    """The failures core's table-driven classification of this kind's evidence."""
    return classify_evidence(EVIDENCE[kind]).severity


# --------------------------------------------------------------------------------------------------
# The policy
# --------------------------------------------------------------------------------------------------

Planner = Callable[[PlanningProblem], PlannedAllocation]


@dataclass(frozen=True)
class OursOptions:
    name: str = "unicron"
    planner: Planner = plan
    #: "cluster": every event re-plans all tasks; "hit-task": a failure re-plans only the hit task
    scope: str = "cluster"
    #: decisions come from precomputed plans (lookup) rather than a DP at failure time
    precomputed: bool = True
    #: partial-result reuse + nearest-state migration; False: every hit task restores the
    #: persistent checkpoint and recomputes since it
    partial_reuse: bool = True
    #: persistent checkpoints (only used by the rollback paths)
    checkpoint_interval_s: float = 30 * 60.0
    #: full-DP decision time when not precomputed: docs/EVALUATION.md target of 2 s at 16,384 GPUs / 64
    #: tasks, scaled linearly in tasks x nodes^2 (the DP's O(m·n²)); our DP is far faster at 128 GPUs
    dp_reference_s: float = 2.0


class Unicron(Policy):
    """Ours: classify, act by severity, re-plan the cluster with the DP on sev1 and capacity changes."""

    def __init__(
        self,
        throughput: PlannerThroughput,
        latency: LatencyProfile | None = None,
        options: OursOptions | None = None,
        max_nodes: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        self.opt = options or OursOptions()
        self.name = self.opt.name
        self.tp = throughput
        self.lat = latency or LatencyProfile()
        self.checkpoint_interval_s = self.opt.checkpoint_interval_s
        self._max_nodes = list(max_nodes) if max_nodes is not None else None
        self._transition: list[TransitionModel] = []
        self._cache: dict[PlanningProblem, PlannedAllocation] = {}
        self._ran: set[int] = set()

    def setup(self, view: SimView) -> None:
        self._transition = [
            TransitionModel(state_bytes=gpt_spec(t.model).model_state_bytes(), restart_s=self.lat.restart_s)
            for t in view.tasks
        ]

    # ---- helpers -------------------------------------------------------------------------------

    def _d_running(self, view: SimView) -> float:
        """D_running from the observed failure rate (planning core's formula), with a prior of one
        failure per node-month so the first plans are not myopic; quantised to a factor-of-2 grid
        so that plans for recurring states are reused from the cache."""
        g = view.cluster.gpus_per_node
        node_s = view.cluster.nodes * (view.now + 30 * 86_400.0)
        mtbf = node_s / (view.failures_seen() + view.cluster.nodes * 1.0)
        d = expected_running_duration_s(mtbf, max(1, sum(view.nodes_of(t) for t in view.active_tasks())))
        del g
        return float(2.0 ** round(math.log2(max(d, 60.0))))

    def _task_state(self, view: SimView, t: int, hit: bool) -> TaskState:
        g = view.cluster.gpus_per_node
        cap = self._max_nodes[t] if self._max_nodes is not None else view.cluster.nodes
        return TaskState(
            task_id=str(t),
            weight=view.tasks[t].weight,
            table=self.tp.tables[t],
            workers=self.tp.used_nodes(t, view.nodes_of(t)) * g,
            hit=hit,
            max_workers=cap * g,
            transition=self._transition[t],
        )

    def _plan(self, problem: PlanningProblem) -> tuple[PlannedAllocation, bool]:
        got = self._cache.get(problem)
        if got is not None:
            self.stats.lookups += 1
            return got, False
        p = self.opt.planner(problem)
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[problem] = p
        return p, True

    def _decision_s(self, view: SimView, tasks: int) -> float:
        if self.opt.precomputed:
            return self.lat.lookup_s
        return self.opt.dp_reference_s * (tasks / 64) * (view.healthy_nodes() / 2048) ** 2

    def _transition_s(
        self, view: SimView, t: int, old_nodes: int, new_nodes: int, hit: bool
    ) -> tuple[float, bool]:
        """(pause, rollback) for task t moving old -> new nodes, from the planning core's model."""
        g = view.cluster.gpus_per_node
        model = self._transition[t]
        old_w = self.tp.used_nodes(t, old_nodes) * g
        new_w = self.tp.used_nodes(t, new_nodes) * g
        ways = self.tp.shard_ways(t, new_nodes)
        if not self.opt.partial_reuse and hit:
            # no nearest-state migration: everyone reads the checkpoint and recomputes since it
            return model.restart_s + model.state_bytes / max(ways, 1) / model.checkpoint_bandwidth, True
        d = model.duration_s(old_w, new_w, hit=hit, shard_ways=ways)
        lost_every_replica = hit and not (old_w >= ways and old_w > 0)
        if lost_every_replica:
            # the model's fixed rollback_s is replaced by the simulated time since the last checkpoint
            return d - model.rollback_s, True
        return d, False

    def _lost_partial_s(self, view: SimView, t: int, nodes: int) -> float:
        """Partial-result reuse: only the failed replica's micro-batches are lost (<= 1/DP of an
        iteration); without it the whole interrupted iteration is."""
        it = self.tp.iteration_s(t, max(nodes, 1))
        return it / self.tp.dp_of(t, max(nodes, 1)) if self.opt.partial_reuse else it

    def _replan(self, view: SimView, hit: int | None, reason: str) -> Decision:
        active = [t for t in view.active_tasks()]
        if hit is not None and self.opt.scope == "hit-task":
            tasks = [hit]
            capacity = view.nodes_of(hit) + view.free_nodes()
        else:
            tasks = active
            capacity = view.healthy_nodes()
        if not tasks:
            return Decision()
        problem = PlanningProblem(
            tasks=tuple(self._task_state(view, t, t == hit) for t in tasks),
            capacity_units=capacity,
            d_running_s=self._d_running(view),
            unit_size=view.cluster.gpus_per_node,
        )
        result, computed = self._plan(problem)
        if not self.opt.precomputed:
            self.stats.plan_calls += 1
        elif computed:
            self.stats.plan_calls += 1  # done ahead of time in the live system: no latency charged
        g = view.cluster.gpus_per_node
        decide = self._decision_s(view, len(tasks))
        shrink: list[Change] = []
        grow: list[Change] = []
        for a in result.tasks:
            t = int(a.task_id)
            old_nodes = view.nodes_of(t)
            new_nodes = a.new_workers // g
            was_hit = t == hit
            fresh = t not in self._ran and view.phase_of(t) is not Phase.RUNNING
            if new_nodes > 0:
                self._ran.add(t)
            if new_nodes == old_nodes and not was_hit:
                if fresh and new_nodes > 0:
                    grow.append(Change(t, new_nodes))
                continue
            if fresh:
                # a task's first start is free under every policy (nobody is charged a cold start)
                (grow if new_nodes > old_nodes else shrink).append(Change(t, new_nodes))
                continue
            pause, rollback = self._transition_s(view, t, old_nodes, new_nodes, was_hit)
            segs: list[tuple[Cause, float]] = []
            if was_hit:
                segs.append((Cause.DECISION, decide))
            segs.append((Cause.TRANSITION, pause))
            lost = self._lost_partial_s(view, t, old_nodes) if was_hit else 0.0
            ch = Change(t, new_nodes, tuple(segs), rollback=rollback, lost_s=0.0 if rollback else lost)
            (grow if new_nodes > old_nodes else shrink).append(ch)
        return Decision(tuple(shrink + grow), plan_calls=0, note=reason)

    # ---- Policy --------------------------------------------------------------------------------

    def min_nodes(self, view: SimView, task: int) -> int:
        return max(1, self.tp.min_nodes(task))

    def detection_s(self, view: SimView, record: FailureRecord, task: int) -> float:
        return self.lat.detection_for(record.kind, self.tp.iteration_s(task, max(view.nodes_of(task), 1)))

    def on_failure(self, view: SimView, record: FailureRecord, task: int) -> Decision:
        sev = severity_of(record.kind)
        nodes = view.nodes_of(task)
        if sev is Severity.SEV3 and not record.kind.is_hardware:
            # retry in place: repeat the step (the interrupted iteration is redone)
            it = self.tp.iteration_s(task, max(nodes, 1))
            return Decision((Change(task, nodes, ((Cause.RETRY, it),)),))
        if sev is Severity.SEV2 and not record.kind.is_hardware:
            # restart the task's processes on the same nodes; state from a peer replica / snapshot
            pause, rollback = self._transition_s(view, task, nodes, nodes, hit=True)
            lost = 0.0 if rollback else self._lost_partial_s(view, task, nodes)
            return Decision((Change(task, nodes, ((Cause.RESTART, pause),), rollback=rollback, lost_s=lost),))
        # sev1 (or hardware whatever the evidence said): the node is isolated -> plan for all tasks
        return self._replan(view, task, "sev1")

    def on_arrivals(self, view: SimView, tasks: Sequence[int]) -> Decision:
        return self._replan(view, None, "arrival")

    def on_capacity(self, view: SimView, reason: str, node: int | None) -> Decision:
        return self._replan(view, None, reason)


def ablations(
    throughput: PlannerThroughput, latency: LatencyProfile, max_nodes: Sequence[int] | None
) -> list[Unicron]:
    """Ours without precomputation, without partial reuse, and with single-task greedy planning."""
    return [
        Unicron(throughput, latency, OursOptions(name="ours-no-precompute", precomputed=False), max_nodes),
        Unicron(
            throughput, latency, OursOptions(name="ours-no-partial-reuse", partial_reuse=False), max_nodes
        ),
        Unicron(
            throughput,
            latency,
            OursOptions(name="ours-single-task-greedy", planner=greedy_marginal_plan, scope="hit-task"),
            max_nodes,
        ),
    ]
