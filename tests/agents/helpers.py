"""Shared helpers for agent tests: launches, free ports, agent subprocesses."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path

from agents.workers import TaskGroup, Worker
from controlplane.core.protocol import (
    Detector,
    ModelSpec,
    ParallelConfig,
    RankAssignment,
    Rendezvous,
    StartWorkersCommand,
    WorkerEvent,
    WorkerLaunch,
)

TINY = ModelSpec(layers=2, hidden=64, heads=4, seq_len=32, vocab=128, micro_batch=2, global_batch=8)
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(
    tp: int = 1,
    pp: int = 1,
    dp: int = 2,
    iterations: int = 1000,
    model: ModelSpec = TINY,
    timeout_s: float = 20.0,
    ranks: list[int] | None = None,
) -> WorkerLaunch:
    world = tp * pp * dp
    ranks = list(range(world)) if ranks is None else ranks
    return WorkerLaunch(
        model=model,
        parallel=ParallelConfig(tp=tp, pp=pp, dp=dp),
        world_size=world,
        ranks=[RankAssignment(rank=r, device=i) for i, r in enumerate(ranks)],
        rendezvous=Rendezvous(master_addr="127.0.0.1", master_port=free_port(), timeout_s=timeout_s),
        iterations=iterations,
        collective_timeout_s=timeout_s,
    )


def start_command(task_id: str, epoch: int, wl: WorkerLaunch, command_id: str) -> StartWorkersCommand:
    return StartWorkersCommand(command_id=command_id, task_id=task_id, epoch=epoch, launch=wl)


@dataclass
class RecordingHost:
    """A worker monitor's host (``agents.worker_monitor.MonitorHost``) that records what it reports."""

    groups: dict[str, TaskGroup] = field(default_factory=dict)
    sent: list[tuple[int, WorkerEvent, Detector | None]] = field(default_factory=list)

    def report(
        self,
        w: Worker,
        event: WorkerEvent,
        detector: Detector | None,
        occurred: float | None = None,
        epoch: int | None = None,
        rank: int | None = None,
    ) -> None:
        self.sent.append((w.rank, event, detector))
