"""Supervisor vocabulary: spec, state and result (after torch elastic's WorkerSpec/WorkerState/RunResult).

A :class:`WorkerSpec` says what to run for one task on this node (the command's launch, its epoch);
each :class:`Worker` carries its :class:`WorkerState`; a finished group yields a :class:`RunResult`
with per-rank :class:`ExitRecord` evidence. The agent sends evidence; the coordinator classifies.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from controlplane.core.protocol import WorkerLaunch


class WorkerState(enum.StrEnum):
    INIT = "init"
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"  # hung or straggling, still alive
    STOPPED = "stopped"  # stopped by the agent on command
    SUCCEEDED = "succeeded"  # ran all its iterations
    FAILED = "failed"  # exited abnormally

    @property
    def is_terminal(self) -> bool:
        return self in (WorkerState.STOPPED, WorkerState.SUCCEEDED, WorkerState.FAILED)

    @property
    def is_running(self) -> bool:
        return self in (WorkerState.INIT, WorkerState.HEALTHY, WorkerState.UNHEALTHY)


@dataclass(frozen=True)
class WorkerSpec:
    task_id: str
    epoch: int
    launch: WorkerLaunch
    kind: str = "megatron"  # "megatron" | "sim"


@dataclass(frozen=True)
class ExitRecord:
    rank: int
    exit_code: int | None
    signal: int | None
    expected: bool


@dataclass
class RunResult:
    state: WorkerState
    exits: dict[int, ExitRecord] = field(default_factory=dict)

    @property
    def is_failed(self) -> bool:
        return self.state == WorkerState.FAILED
