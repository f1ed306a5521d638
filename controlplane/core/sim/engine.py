"""Discrete-event engine: advances through failures, detections, decisions, recovery segments,
repairs, task arrivals and completions; records WAF over time, downtime by cause and lost work.

Between two events every rate is constant, so accumulated WAF is integrated exactly (no time step).
Ties are broken by insertion order, and nothing reads a clock or an unseeded RNG, so a run is a pure
function of its inputs.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from controlplane.core.sim.model import Cause, ClusterSpec, Downtime, SimTask, ThroughputModel
from controlplane.core.sim.policy import Change, Decision, Phase, Policy
from controlplane.core.sim.trace import FailureKind, Trace


class SimulationError(RuntimeError):
    """A policy asked for something impossible (e.g. more nodes than are free)."""


class Ev(IntEnum):
    ARRIVAL = 0
    FAILURE = 1
    DETECTED = 2
    SEGMENT_END = 3
    REPAIR = 4
    COMPLETION = 5


@dataclass
class _Task:
    idx: int
    spec: SimTask
    nodes: list[int] = field(default_factory=list)
    phase: Phase = Phase.PENDING
    cause: Cause | None = None
    cause_since: float = 0.0
    segments: list[tuple[Cause, float]] = field(default_factory=list)
    version: int = 0
    progress: float = 0.0  # useful model FLOPs
    since_ckpt_s: float = 0.0
    pending_recompute: float = 0.0  # FLOPs to redo before new progress
    rate: float = 0.0  # useful FLOP/s now
    last_rate: float = 0.0  # rate before the current interruption
    waf: float = 0.0  # accumulated weighted FLOPs
    lost_flops: float = 0.0
    failures: int = 0
    completed_at: float | None = None
    ran: bool = False


@dataclass(frozen=True)
class TaskResult:
    name: str
    weight: float
    accumulated_waf: float
    progress_flops: float
    lost_flops: float
    failures: int
    completed_at: float | None
    final_nodes: int


@dataclass(frozen=True)
class SimResult:
    policy: str
    trace: str
    duration_s: float
    accumulated_waf: float  # weighted FLOPs over the run
    timeline: tuple[tuple[float, float], ...]  # (time, cluster WAF rate) at each change
    downtime: Downtime
    lost_work_flops: float  # unweighted model FLOPs rolled back
    lost_work_waf: float  # weighted
    tasks: tuple[TaskResult, ...]
    failures_by_kind: dict[str, int]
    failures_ignored: int  # on a node already under repair
    plan_calls: int
    lookups: int
    events: int

    @property
    def mean_waf(self) -> float:
        return self.accumulated_waf / self.duration_s if self.duration_s > 0 else 0.0

    def accumulated_curve(self, points: int = 200) -> list[tuple[float, float]]:
        """(time, accumulated WAF) sampled at `points` evenly spaced times, exact at each sample."""
        out: list[tuple[float, float]] = []
        tl = self.timeline
        acc = 0.0
        j = 0
        prev_t, rate = 0.0, 0.0
        for k in range(points + 1):
            t = self.duration_s * k / points
            while j < len(tl) and tl[j][0] <= t:
                acc += rate * (tl[j][0] - prev_t)
                prev_t, rate = tl[j]
                j += 1
            out.append((t, acc + rate * (t - prev_t)))
        return out


class Simulator:
    """One run: a cluster, tasks, a trace and a policy. Use `run()` once."""

    def __init__(
        self,
        cluster: ClusterSpec,
        tasks: Sequence[SimTask],
        throughput: ThroughputModel,
        trace: Trace,
        policy: Policy,
        *,
        default_repair_s: dict[FailureKind, float] | None = None,
        check_invariants: bool = True,
        progress: Callable[[float], None] | None = None,
    ) -> None:
        trace.check_fits(cluster.nodes, cluster.gpus_per_node)
        self._cluster = cluster
        self._specs = tuple(tasks)
        self._throughput = throughput
        self.trace = trace
        self.policy = policy
        self._default_repair = default_repair_s or {
            FailureKind.GPU_HARDWARE: 8 * 3600.0,
            FailureKind.NODE_LOSS: 3 * 3600.0,
        }
        self._check = check_invariants
        self._progress = progress
        self._now = 0.0
        self._tasks = [_Task(i, t) for i, t in enumerate(self._specs)]
        self._owner: dict[int, int] = {}
        self._free: set[int] = set(range(cluster.nodes))
        self._failed: set[int] = set()
        self._heap: list[tuple[float, int, Ev, int, int]] = []
        self._seq = 0
        self._timeline: list[tuple[float, float]] = []
        self._downtime = Downtime()
        self._failures = Counter[str]()
        self._ignored = 0
        self._seen = 0
        self._events = 0
        self._ran = False

    # ---- SimView -------------------------------------------------------------------------------

    @property
    def now(self) -> float:
        return self._now

    @property
    def cluster(self) -> ClusterSpec:
        return self._cluster

    @property
    def tasks(self) -> Sequence[SimTask]:
        return self._specs

    @property
    def throughput(self) -> ThroughputModel:
        return self._throughput

    def nodes_of(self, task: int) -> int:
        return len(self._tasks[task].nodes)

    def phase_of(self, task: int) -> Phase:
        return self._tasks[task].phase

    def active_tasks(self) -> list[int]:
        return [t.idx for t in self._tasks if t.phase not in (Phase.PENDING, Phase.DONE)]

    def free_nodes(self) -> int:
        return len(self._free)

    def healthy_nodes(self) -> int:
        return self._cluster.nodes - len(self._failed)

    def failures_seen(self) -> int:
        return self._seen

    # ---- event queue ---------------------------------------------------------------------------

    def _push(self, t: float, ev: Ev, a: int, b: int = 0) -> None:
        heapq.heappush(self._heap, (t, self._seq, ev, a, b))
        self._seq += 1

    # ---- main loop -----------------------------------------------------------------------------

    def run(self) -> SimResult:
        if self._ran:
            raise RuntimeError("a Simulator runs once; build a new one")
        self._ran = True
        end = self.trace.duration_s
        for task in self._tasks:
            self._push(task.spec.arrival_s, Ev.ARRIVAL, task.idx)
        for i, rec in enumerate(self.trace.records):
            self._push(rec.time_s, Ev.FAILURE, i)
        self.policy.setup(self)
        self._timeline.append((0.0, 0.0))
        next_report = 0.0
        while self._heap and self._heap[0][0] <= end:
            t, _, ev, a, b = heapq.heappop(self._heap)
            self._advance(t)
            self._events += 1
            if ev is Ev.ARRIVAL:
                arrivals = [a]
                while self._heap and self._heap[0][2] is Ev.ARRIVAL and self._heap[0][0] == t:
                    arrivals.append(heapq.heappop(self._heap)[3])
                self._on_arrivals(arrivals)
            elif ev is Ev.FAILURE:
                self._on_failure(a)
            elif ev is Ev.DETECTED:
                self._on_detected(a, b)
            elif ev is Ev.SEGMENT_END:
                self._on_segment_end(a, b)
            elif ev is Ev.REPAIR:
                self._on_repair(a)
            elif ev is Ev.COMPLETION:
                self._on_completion(a, b)
            self._record_rate()
            if self._progress is not None and t >= next_report:
                self._progress(t / end)
                next_report = t + end / 100
        self._advance(end)
        for task in self._tasks:
            self._close_cause(task)
        if self._progress is not None:
            self._progress(1.0)
        return self._result()

    def _advance(self, t: float) -> None:
        dt = t - self._now
        if dt < 0:
            raise SimulationError(f"time went backwards: {t} < {self._now}")
        if dt > 0:
            interval = self.policy.checkpoint_interval_s
            for task in self._tasks:
                if task.phase is Phase.RUNNING and task.rate > 0:
                    task.progress += task.rate * dt
                    task.waf += task.spec.weight * task.rate * dt
                    s = task.since_ckpt_s + dt
                    task.since_ckpt_s = s % interval if interval > 0 else s
        self._now = t

    def _record_rate(self) -> None:
        rate = sum((t.spec.weight * t.rate for t in self._tasks if t.phase is Phase.RUNNING), 0.0)
        if self._timeline[-1][1] != rate:
            if self._timeline[-1][0] == self._now:
                self._timeline[-1] = (self._now, rate)
            else:
                self._timeline.append((self._now, rate))

    # ---- task state ----------------------------------------------------------------------------

    def _close_cause(self, task: _Task) -> None:
        if task.cause is not None:
            self._downtime.add(task.cause, self._now - task.cause_since, task.spec.weight * task.last_rate)
            task.cause = None

    def _set_cause(self, task: _Task, cause: Cause) -> None:
        self._close_cause(task)
        task.cause = cause
        task.cause_since = self._now

    def _stop(self, task: _Task, phase: Phase, cause: Cause) -> None:
        if task.phase is Phase.RUNNING:
            task.last_rate = task.rate
        task.rate = 0.0
        task.phase = phase
        task.version += 1
        self._set_cause(task, cause)

    def _try_run(self, task: _Task) -> None:
        n = len(task.nodes)
        rate = 0.0
        if n >= self.policy.min_nodes(self, task.idx):
            rate = self._throughput.flops(task.idx, n) * self.policy.throughput_factor
        if rate <= 0:
            cause = Cause.WAITING if task.ran else Cause.QUEUED
            if task.phase is not Phase.WAITING or task.cause is not cause:
                self._stop(task, Phase.WAITING, cause)
            return
        if task.pending_recompute > 0:
            dur = task.pending_recompute / rate
            task.pending_recompute = 0.0
            self._start_segments(task, [(Cause.RECOMPUTE, dur)])
            return
        self._close_cause(task)
        task.phase = Phase.RUNNING
        task.ran = True
        task.rate = rate
        task.version += 1
        if task.spec.work_flops is not None:
            remaining = max(0.0, task.spec.work_flops - task.progress)
            self._push(self._now + remaining / rate, Ev.COMPLETION, task.idx, task.version)

    def _start_segments(self, task: _Task, segments: list[tuple[Cause, float]]) -> None:
        segs = [(c, d) for c, d in segments if d > 0]
        if not segs:
            self._try_run(task)
            return
        self._stop(task, Phase.DOWN, segs[0][0])
        task.segments = segs
        self._push(self._now + segs[0][1], Ev.SEGMENT_END, task.idx, task.version)

    def _on_segment_end(self, idx: int, version: int) -> None:
        task = self._tasks[idx]
        if task.version != version or not task.segments:
            return
        cause, dur = task.segments.pop(0)
        if cause is Cause.RECOMPUTE:
            interval = self.policy.checkpoint_interval_s
            task.since_ckpt_s = dur % interval if interval > 0 else dur
        if task.segments:
            self._set_cause(task, task.segments[0][0])
            task.version += 1
            self._push(self._now + task.segments[0][1], Ev.SEGMENT_END, idx, task.version)
        else:
            self._try_run(task)

    # ---- events --------------------------------------------------------------------------------

    def _on_arrivals(self, idxs: list[int]) -> None:
        for i in idxs:
            task = self._tasks[i]
            task.phase = Phase.WAITING
            self._set_cause(task, Cause.QUEUED)
        self._apply(self.policy.on_arrivals(self, idxs))
        for i in idxs:
            task = self._tasks[i]
            if task.phase is Phase.WAITING and task.nodes:
                self._try_run(task)

    def _on_failure(self, i: int) -> None:
        rec = self.trace.records[i]
        self._failures[rec.kind.value] += 1
        if rec.node in self._failed:
            self._ignored += 1
            return
        self._seen += 1
        owner = self._owner.get(rec.node)
        if rec.kind.is_hardware:
            repair = rec.repair_s if rec.repair_s is not None else self._default_repair.get(rec.kind, 0.0)
            self._failed.add(rec.node)
            self._free.discard(rec.node)
            if owner is not None:
                self._tasks[owner].nodes.remove(rec.node)
                del self._owner[rec.node]
            self._push(self._now + repair, Ev.REPAIR, rec.node)
        if owner is None:
            return
        task = self._tasks[owner]
        if task.phase is Phase.DONE:
            return
        task.failures += 1
        task.segments = []
        self._stop(task, Phase.DOWN, Cause.DETECTION)
        self._push(self._now + self.policy.detection_s(self, rec, owner), Ev.DETECTED, i, owner)

    def _on_detected(self, i: int, owner: int) -> None:
        task = self._tasks[owner]
        if task.phase is Phase.DONE:
            return
        decision = self.policy.on_failure(self, self.trace.records[i], owner)
        self._apply(decision)
        # A failed task the decision did not mention restarts directly (e.g. a retry with no cost).
        if task.cause is Cause.DETECTION and not any(c.task == owner for c in decision.changes):
            self._try_run(task)

    def _on_repair(self, node: int) -> None:
        self._failed.discard(node)
        self._free.add(node)
        self._apply(self.policy.on_capacity(self, "repair", node))

    def _on_completion(self, idx: int, version: int) -> None:
        task = self._tasks[idx]
        if task.version != version or task.phase is not Phase.RUNNING:
            return
        self._close_cause(task)
        task.phase = Phase.DONE
        task.rate = 0.0
        task.completed_at = self._now
        for node in task.nodes:
            del self._owner[node]
            self._free.add(node)
        task.nodes = []
        self._apply(self.policy.on_capacity(self, "completion", None))

    # ---- applying decisions --------------------------------------------------------------------

    def _apply(self, decision: Decision) -> None:
        self.policy.stats.decisions += 1
        self.policy.stats.plan_calls += decision.plan_calls
        changes = decision.changes
        for ch in changes:
            task = self._tasks[ch.task]
            if ch.nodes < 0:
                raise SimulationError(f"{self.policy.name}: negative node count for task {ch.task}")
            if task.phase in (Phase.PENDING, Phase.DONE) and ch.nodes > 0:
                raise SimulationError(f"{self.policy.name}: nodes for task {ch.task} in phase {task.phase}")
            while len(task.nodes) > ch.nodes:
                node = max(task.nodes)
                task.nodes.remove(node)
                del self._owner[node]
                self._free.add(node)
        for ch in changes:
            task = self._tasks[ch.task]
            need = ch.nodes - len(task.nodes)
            if need > len(self._free):
                raise SimulationError(
                    f"{self.policy.name}: task {ch.task} needs {need} more nodes, {len(self._free)} free"
                )
            if need > 0:
                grant = sorted(self._free)[:need]
                for node in grant:
                    self._free.remove(node)
                    self._owner[node] = ch.task
                task.nodes.extend(grant)
                task.nodes.sort()
        for ch in changes:
            self._apply_pauses(self._tasks[ch.task], ch)
        if self._check:
            self._check_conservation()

    def _apply_pauses(self, task: _Task, ch: Change) -> None:
        if task.phase in (Phase.PENDING, Phase.DONE):
            return
        before = task.rate if task.phase is Phase.RUNNING else task.last_rate
        lost_s = ch.lost_s + (task.since_ckpt_s if ch.rollback else 0.0)
        if lost_s > 0:
            # The work stays in the accumulated WAF it was earned in; the task pays for it by
            # recomputing it (a RECOMPUTE pause) before it makes new progress.
            lost = lost_s * before
            task.lost_flops += lost
            task.pending_recompute += lost
            task.since_ckpt_s = 0.0
        if ch.segments:
            self._start_segments(task, list(ch.segments))
        else:
            self._try_run(task)

    def _check_conservation(self) -> None:
        allocated = [n for t in self._tasks for n in t.nodes]
        if len(allocated) != len(set(allocated)):
            raise SimulationError("a node is allocated to two tasks")
        if set(allocated) & self._failed:
            raise SimulationError("a failed node is allocated")
        if len(allocated) + len(self._free) + len(self._failed) != self._cluster.nodes:
            raise SimulationError("nodes not conserved")
        gpus = len(allocated) * self._cluster.gpus_per_node
        if gpus > (self._cluster.nodes - len(self._failed)) * self._cluster.gpus_per_node:
            raise SimulationError("devices in use exceed healthy capacity")

    # ---- result --------------------------------------------------------------------------------

    def _result(self) -> SimResult:
        tasks = tuple(
            TaskResult(
                name=t.spec.name,
                weight=t.spec.weight,
                accumulated_waf=t.waf,
                progress_flops=t.progress,
                lost_flops=t.lost_flops,
                failures=t.failures,
                completed_at=t.completed_at,
                final_nodes=len(t.nodes),
            )
            for t in self._tasks
        )
        return SimResult(
            policy=self.policy.name,
            trace=self.trace.name,
            duration_s=self.trace.duration_s,
            accumulated_waf=sum(t.waf for t in self._tasks),
            timeline=tuple(self._timeline),
            downtime=self._downtime,
            lost_work_flops=sum(t.lost_flops for t in self._tasks),
            lost_work_waf=sum(t.lost_flops * t.spec.weight for t in self._tasks),
            tasks=tasks,
            failures_by_kind=dict(self._failures),
            failures_ignored=self._ignored,
            plan_calls=self.policy.stats.plan_calls,
            lookups=self.policy.stats.lookups,
            events=self._events,
        )
