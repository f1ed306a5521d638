"""Baseline policies: Megatron checkpoint-restart and models of Oobleck, Varuna and Bamboo.

All baselines are single-task systems: each task keeps the nodes it started with (its submitted
size, or the same initial plan as ours, see `initial_sizes`), nobody moves nodes between tasks, and a
repaired node goes back to the task that lost it. They differ in failure-free throughput, how fast
they notice a failure, what a failure costs them and whether they can run on fewer nodes.

Every parameter carries its source. Where a paper gives no usable figure for our setting the value
is marked ASSUMPTION with the reasoning; docs/EVALUATION.md discusses which of them drive results.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from controlplane.core.sim.model import Cause
from controlplane.core.sim.policy import NO_CHANGE, Change, Decision, Phase, Policy, SimView
from controlplane.core.sim.trace import FailureRecord

MIN = 60.0


class _StaticPolicy(Policy):
    """Shared mechanics: fixed initial sizes, repaired nodes go back to their task."""

    def __init__(self, initial_sizes: Mapping[int, int] | None = None) -> None:
        super().__init__()
        self._initial = dict(initial_sizes or {})
        self._target: dict[int, int] = {}
        self._owner_of_failed: dict[int, int] = {}
        self._queue: list[int] = []  # tasks waiting for nodes, FIFO
        self._failed_tasks: set[int] = set()

    def target(self, view: SimView, task: int) -> int:
        return self._target.get(task, self._initial.get(task, view.tasks[task].nodes))

    def on_arrivals(self, view: SimView, tasks: Sequence[int]) -> Decision:
        for t in tasks:
            self._target[t] = self.target(view, t)
            self._queue.append(t)
        return self._serve_queue(view)

    def _serve_queue(
        self, view: SimView, restart: tuple[tuple[Cause, float], ...] = (), reserved: int = 0
    ) -> Decision:
        """Grant whole target sizes to queued tasks in FIFO order while nodes are free."""
        free = view.free_nodes() - reserved
        changes: list[Change] = []
        still: list[int] = []
        for t in self._queue:
            need = self._target[t] - view.nodes_of(t)
            if t in still or need > free or view.phase_of(t) is Phase.DONE:
                still.append(t)
                continue
            free -= max(0, need)
            # a task's first start is free under every policy; a restart after a failure is not
            changes.append(Change(t, self._target[t], restart if t in self._failed_tasks else ()))
        self._queue = still
        return Decision(tuple(changes))


# --------------------------------------------------------------------------------------------------
# Megatron-LM checkpoint-restart
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointRestartParams:
    # docs/EVALUATION.md / Unicron paper §2 (observed restart path in Alibaba's clusters): ~68 min per
    # failure = 30 min detection (collective timeout / heartbeat) + 9 min requeue + 14 min setup
    # + 15 min recompute on average. The recompute is simulated from the checkpoint interval:
    # a 30 min interval loses 15 min on average.
    detection_s: float = 30 * MIN
    requeue_s: float = 9 * MIN
    setup_s: float = 14 * MIN
    checkpoint_interval_s: float = 30 * MIN


class CheckpointRestart(_StaticPolicy):
    """Every failure kills the job; it is requeued at its full size once enough nodes are healthy."""

    name = "checkpoint-restart"

    def __init__(
        self, params: CheckpointRestartParams | None = None, initial_sizes: Mapping[int, int] | None = None
    ) -> None:
        super().__init__(initial_sizes)
        self.p = params or CheckpointRestartParams()
        self.checkpoint_interval_s = self.p.checkpoint_interval_s

    def min_nodes(self, view: SimView, task: int) -> int:
        return self.target(view, task)  # a fixed-size job

    def detection_s(self, view: SimView, record: FailureRecord, task: int) -> float:
        return self.p.detection_s

    def on_failure(self, view: SimView, record: FailureRecord, task: int) -> Decision:
        have = view.nodes_of(task)
        need = self.target(view, task) - have
        restart = ((Cause.REQUEUE, self.p.requeue_s), (Cause.SETUP, self.p.setup_s))
        if need <= view.free_nodes():
            return Decision((Change(task, self.target(view, task), restart, rollback=True),))
        # Not enough healthy spare nodes: resubmitted, it holds what it has and waits in the queue.
        self._failed_tasks.add(task)
        if task not in self._queue:
            self._queue.append(task)
        return Decision((Change(task, have, ((Cause.REQUEUE, self.p.requeue_s),), rollback=True),))

    def on_capacity(self, view: SimView, reason: str, node: int | None) -> Decision:
        if not self._queue:
            return NO_CHANGE
        return self._serve_queue(view, ((Cause.SETUP, self.p.setup_s),))


# --------------------------------------------------------------------------------------------------
# Elastic baselines
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ElasticParams:
    name: str
    throughput_factor: float  # failure-free throughput relative to Megatron-LM's best config
    detection_s: float  # failure -> noticed
    reconfigure_s: float  # pause to shrink (or grow) to the surviving nodes
    transient_restart_s: float  # pause for a transient (software/network) failure in place
    rollback_on_failure: bool  # restarts from the last checkpoint (loses work since it)
    lost_iterations: float  # in-flight iterations lost when not rolling back
    checkpoint_interval_s: float
    rejoin: bool = True  # a repaired node is added back (with another reconfiguration)


# Oobleck (Jang et al., "Oobleck: Resilient Distributed Training of Large Models Using Pipeline
# Templates", SOSP'23). Keeps f+1 pipeline replicas instantiated from precomputed heterogeneous
# pipeline templates and recovers by re-instantiating pipelines from templates and copying lost
# layers from surviving replicas, without a checkpoint (§4-5 of the paper); it loses the in-flight
# iteration. Its reported recovery takes seconds to tens of seconds.
# ASSUMPTION: reconfiguration 60 s and detection 10 s (agent connection loss; the paper's agents
# watch worker processes, so detection is not a collective timeout). ASSUMPTION: failure-free
# throughput 0.85x Megatron: Oobleck trains with pipeline + data parallelism over DeepSpeed-style
# execution without Megatron's tensor-parallel kernels; the Unicron paper's failure-free comparison
# shows Oobleck below Megatron but we did not take an exact figure from it.
OOBLECK = ElasticParams(
    name="oobleck",
    throughput_factor=0.85,
    detection_s=10.0,
    reconfigure_s=60.0,
    transient_restart_s=60.0,
    rollback_on_failure=False,
    lost_iterations=1.0,
    checkpoint_interval_s=30 * MIN,
)

# Varuna (Athlur et al., "Varuna: Scalable, Low-cost Training of Massive Deep Learning Models",
# EuroSys'22). Targets low-priority VMs: on a preemption or failure it "morphs" the job to the new
# resource count by restarting from the latest checkpoint with a new pipeline/data-parallel config
# (§5), so every failure rolls back to a checkpoint, which it takes often.
# ASSUMPTION: checkpoint every 10 min (Varuna checkpoints frequently and in the background), a
# restart (process launch, config search, checkpoint load) of 5 min, detection 1 min (its manager
# polls VM and process liveness). ASSUMPTION: 0.80x failure-free throughput: Varuna uses
# pipeline + data parallelism only (no intra-layer tensor parallelism) and is tuned for commodity
# networks; for GPT-3-class models on NVLink nodes that costs against Megatron's 3D parallelism.
VARUNA = ElasticParams(
    name="varuna",
    throughput_factor=0.80,
    detection_s=60.0,
    reconfigure_s=5 * MIN,
    transient_restart_s=5 * MIN,
    rollback_on_failure=True,
    lost_iterations=0.0,
    checkpoint_interval_s=10 * MIN,
)

# Bamboo (Thorpe et al., "Bamboo: Making Preemptible Instances Resilient for Affordable Training of
# Large DNNs", NSDI'23). Each node also runs redundant computation for its pipeline neighbour's
# layers, so when a node is lost its neighbour takes over at once ("failover") and training goes on;
# the pipeline is reconfigured later; only consecutive losses force a checkpoint restart.
# ASSUMPTION: 0.70x failure-free throughput: redundant computation is placed in pipeline bubbles but
# also needs memory for the neighbour's layers (so more pipeline stages) and the extra forward work;
# the Unicron paper's failure-free comparison places Bamboo lowest of the baselines.
# ASSUMPTION: failover in 30 s including detection (10 s), reconfiguration on repair 60 s.
BAMBOO = ElasticParams(
    name="bamboo",
    throughput_factor=0.70,
    detection_s=10.0,
    reconfigure_s=20.0,
    transient_restart_s=20.0,
    rollback_on_failure=False,
    lost_iterations=0.0,
    checkpoint_interval_s=30 * MIN,
)

ELASTIC_BASELINES: dict[str, ElasticParams] = {p.name: p for p in (OOBLECK, VARUNA, BAMBOO)}


class ElasticBaseline(_StaticPolicy):
    """A single-task elastic system: shrinks to the surviving nodes, grows back when they return."""

    def __init__(self, params: ElasticParams, initial_sizes: Mapping[int, int] | None = None) -> None:
        super().__init__(initial_sizes)
        self.p = params
        self.name = params.name
        self.throughput_factor = params.throughput_factor
        self.checkpoint_interval_s = params.checkpoint_interval_s

    def detection_s(self, view: SimView, record: FailureRecord, task: int) -> float:
        return self.p.detection_s

    def on_failure(self, view: SimView, record: FailureRecord, task: int) -> Decision:
        have = view.nodes_of(task)
        lost = self.p.lost_iterations * view.throughput.iteration_s(task, max(have, 1))
        if record.kind.is_hardware:
            self._owner_of_failed[record.node] = task
            pause = self.p.reconfigure_s
        else:
            pause = self.p.transient_restart_s
        change = Change(
            task, have, ((Cause.TRANSITION, pause),), rollback=self.p.rollback_on_failure, lost_s=lost
        )
        return Decision((change,))

    def on_capacity(self, view: SimView, reason: str, node: int | None) -> Decision:
        changes: list[Change] = []
        if node is not None and self.p.rejoin:
            owner = self._owner_of_failed.pop(node, None)
            if owner is not None and view.phase_of(owner) is not Phase.DONE:
                grow = min(self.target(view, owner), view.nodes_of(owner) + 1)
                if grow > view.nodes_of(owner):
                    changes.append(
                        Change(
                            owner,
                            grow,
                            # a planned grow checkpoints first: nothing is lost
                            ((Cause.TRANSITION, self.p.reconfigure_s),),
                        )
                    )
        queued = self._serve_queue(view, reserved=len(changes)) if self._queue else NO_CHANGE
        return Decision(tuple(changes) + queued.changes)
