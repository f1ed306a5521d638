"""The policy interface the engine drives, and the read-only view of the cluster it gets.

A policy never mutates the simulation: it answers each event with a `Decision` (new node counts and
the pauses each changed task goes through), and the engine applies it, choosing concrete nodes and
checking conservation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from controlplane.core.sim.model import Cause, ClusterSpec, SimTask, ThroughputModel
from controlplane.core.sim.trace import FailureRecord


class Phase(StrEnum):
    PENDING = "pending"  # not yet arrived
    RUNNING = "running"
    DOWN = "down"  # going through detection / recovery segments
    WAITING = "waiting"  # too few nodes to run
    DONE = "done"


class SimView(Protocol):
    """What a policy may read about the simulation."""

    @property
    def now(self) -> float: ...

    @property
    def cluster(self) -> ClusterSpec: ...

    @property
    def tasks(self) -> Sequence[SimTask]: ...

    @property
    def throughput(self) -> ThroughputModel: ...

    def nodes_of(self, task: int) -> int: ...

    def phase_of(self, task: int) -> Phase: ...

    def active_tasks(self) -> list[int]:
        """Arrived and not completed."""
        ...

    def free_nodes(self) -> int:
        """Healthy nodes not allocated to any task."""
        ...

    def healthy_nodes(self) -> int: ...

    def failures_seen(self) -> int: ...


@dataclass(frozen=True)
class Change:
    """Give `task` exactly `nodes` nodes; it pauses for `segments` before (re)starting.

    `rollback`: the task loses the work done since its last checkpoint and recomputes it before it
    makes new progress. `lost_s`: a smaller explicit loss (running-seconds of work, e.g. the
    interrupted iteration's micro-batches) that is also recomputed.
    """

    task: int
    nodes: int
    segments: tuple[tuple[Cause, float], ...] = ()
    rollback: bool = False
    lost_s: float = 0.0


@dataclass(frozen=True)
class Decision:
    changes: tuple[Change, ...] = ()
    plan_calls: int = 0  # full planner runs this decision needed (0: a precomputed lookup or none)
    note: str = ""


NO_CHANGE = Decision()


@dataclass
class PolicyStats:
    decisions: int = 0
    plan_calls: int = 0
    lookups: int = 0
    extra: dict[str, float] = field(default_factory=dict)


class Policy(ABC):
    """Base class: subclasses set the parameters and implement the reactions."""

    name: str = "policy"
    #: multiplier on failure-free throughput (1.0 = Megatron-LM with its best config)
    throughput_factor: float = 1.0
    #: running seconds between persistent checkpoints (what a rollback loses); 0 = never
    checkpoint_interval_s: float = 0.0

    def __init__(self) -> None:
        self.stats = PolicyStats()

    def setup(self, view: SimView) -> None:  # noqa: B027 - optional hook
        """Called once before the first event."""

    def min_nodes(self, view: SimView, task: int) -> int:
        """Fewest nodes `task` can run on under this policy."""
        return max(1, view.throughput.min_nodes(task))

    @abstractmethod
    def detection_s(self, view: SimView, record: FailureRecord, task: int) -> float:
        """Seconds from the failure until this policy notices it."""

    @abstractmethod
    def on_failure(self, view: SimView, record: FailureRecord, task: int) -> Decision:
        """Called when the failure on `task` is detected (the failed node, if hardware, is gone)."""

    @abstractmethod
    def on_arrivals(self, view: SimView, tasks: Sequence[int]) -> Decision:
        """Tasks have arrived (all tasks present at time 0 arrive together)."""

    @abstractmethod
    def on_capacity(self, view: SimView, reason: str, node: int | None) -> Decision:
        """Nodes became free: a repair (`node` is back) or a task completed (`node` is None)."""
