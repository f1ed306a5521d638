"""What is simulated: the cluster, the tasks, and how fast a task runs on a number of nodes.

The allocation unit is a node (all its GPUs): a hardware failure isolates the node, and both the
planner and the baselines reason in nodes. Throughput comes from a `ThroughputModel`; the real one
(`controlplane.core.sim.planner_bridge`) asks the planning core's throughput table, and
`TableThroughput` takes explicit numbers for hand-computed scenarios.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol


@dataclass(frozen=True)
class ClusterSpec:
    nodes: int
    gpus_per_node: int = 8
    device_kind: str = "a100-80g"  # a name in the planning core's DEVICE_KINDS

    def __post_init__(self) -> None:
        if self.nodes <= 0 or self.gpus_per_node <= 0:
            raise ValueError("a cluster needs at least one node with at least one GPU")

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class GPTModel:
    """A GPT model and its batch, in the terms of Narayanan et al. (SC'21)."""

    name: str
    layers: int
    hidden: int
    heads: int
    seq_len: int = 2048
    vocab: int = 51_200
    global_batch: int = 1024
    micro_batch: int = 1

    @property
    def params(self) -> float:
        # 12·L·h² (attention + MLP) + V·h (embeddings); biases and norms are negligible.
        return 12 * self.layers * self.hidden**2 + self.vocab * self.hidden


# GPT-3 family (Brown et al. 2020, Table 2.1); vocab padded to 51,200 as Megatron does.
GPT3_MODELS: dict[str, GPTModel] = {
    m.name: m
    for m in (
        GPTModel("gpt3-1.3b", layers=24, hidden=2048, heads=16, global_batch=512),
        GPTModel("gpt3-2.7b", layers=32, hidden=2560, heads=32, global_batch=512),
        GPTModel("gpt3-6.7b", layers=32, hidden=4096, heads=32, global_batch=1024),
        GPTModel("gpt3-13b", layers=40, hidden=5120, heads=40, global_batch=1024),
        GPTModel("gpt3-175b", layers=96, hidden=12288, heads=96, global_batch=1536),
    )
}


@dataclass(frozen=True)
class SimTask:
    """A training task: what it trains, how much it matters, how big it asks to be, how long it runs.

    `nodes` is the size the task was submitted with: the static baselines run it at exactly that
    size (and the planner treats it as nothing special; `max_nodes` bounds what it may grow to).
    `work_flops` is the total model FLOPs it
    must do (None: it trains until the simulation ends).
    """

    name: str
    model: GPTModel
    weight: float
    nodes: int
    arrival_s: float = 0.0
    work_flops: float | None = None
    max_nodes: int | None = None  # the most nodes the task can use (None: the whole cluster)

    def __post_init__(self) -> None:
        if self.weight < 0:
            raise ValueError(f"task {self.name}: weight must be >= 0")
        if self.nodes <= 0:
            raise ValueError(f"task {self.name}: requested nodes must be > 0")
        if self.arrival_s < 0:
            raise ValueError(f"task {self.name}: arrival must be >= 0")


class ThroughputModel(Protocol):
    """Achieved FLOP/s of task `i` on `nodes` whole nodes with its best parallel config."""

    def flops(self, task: int, nodes: int) -> float: ...

    def min_nodes(self, task: int) -> int: ...

    def iteration_s(self, task: int, nodes: int) -> float: ...


@dataclass(frozen=True)
class TableThroughput:
    """Explicit throughput tables: `table[i][n]` FLOP/s of task i on n nodes (0 = infeasible)."""

    table: Sequence[Sequence[float]]
    iteration: float = 1.0

    def flops(self, task: int, nodes: int) -> float:
        row = self.table[task]
        return float(row[min(nodes, len(row) - 1)]) if nodes > 0 else 0.0

    def min_nodes(self, task: int) -> int:
        for n, v in enumerate(self.table[task]):
            if n > 0 and v > 0:
                return n
        return len(self.table[task])

    def iteration_s(self, task: int, nodes: int) -> float:
        return self.iteration


class Cause(StrEnum):
    """Why a task is not making progress (downtime by cause)."""

    DETECTION = "detection"  # failure happened, not yet noticed
    DECISION = "decision"  # computing a plan
    REQUEUE = "requeue"  # job resubmitted to the scheduler
    SETUP = "setup"  # re-initialisation: processes, NCCL, model build, checkpoint load
    RECOMPUTE = "recompute"  # redoing work lost since the last checkpoint
    RESTART = "restart"  # restart processes in place (ours sev2)
    RETRY = "retry"  # repeat the step in place (ours sev3)
    TRANSITION = "transition"  # reconfigure to a new worker count / migrate state
    WAITING = "waiting"  # too few nodes to run after having run (waiting for repair / a plan)
    QUEUED = "queued"  # never started: the initial plan gave it no nodes (not failure downtime)


@dataclass
class Downtime:
    """Totals per cause over all tasks: hours of task time and lost weighted FLOPs."""

    task_s: dict[Cause, float] = field(default_factory=lambda: dict.fromkeys(Cause, 0.0))
    lost_waf: dict[Cause, float] = field(default_factory=lambda: dict.fromkeys(Cause, 0.0))

    def add(self, cause: Cause, seconds: float, waf_rate: float) -> None:
        self.task_s[cause] += seconds
        self.lost_waf[cause] += seconds * waf_rate
