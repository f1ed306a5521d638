"""The agent's record of each local rank (:class:`Worker`) and of each task's ranks on this node
(:class:`TaskGroup`): what runs the rank, its state, and the data its monitoring keeps.

The supervisor (:mod:`agents.supervisor`) creates and launches them; the worker monitor
(:mod:`agents.worker_monitor`) updates them from the rank's hook events and checks them for hangs.
"""

from __future__ import annotations

import asyncio

from agents.api import ExitRecord, RunResult, WorkerSpec, WorkerState
from agents.monitor import MonitorConfig, RankMonitor, TaskStragglers
from agents.training.elastic import TransitionSpec
from agents.training.hook_protocol import HookOrder
from agents.worker_handle import WorkerHandle
from controlplane.core.protocol import WorkerStatus


class Worker:
    """One rank on this node: its process (or simulation), state and monitoring data."""

    def __init__(self, spec: WorkerSpec, rank: int, device: int, cfg: MonitorConfig) -> None:
        self.spec = spec
        self.rank = rank
        self.device = device
        self.state = WorkerState.INIT
        self.handle: WorkerHandle | None = None
        """What runs the rank (a process, or a simulation); None until it is launched."""
        self.monitor = RankMonitor(cfg)
        self.iteration: int | None = None
        self.iter_start: float | None = None
        self.phase = "init"
        self.slow_phase: str | None = None
        self.slow_since = 0.0
        self.expected_exit = False
        self.finished = False
        self.exception_reported = False
        self.hang_reported = False
        self.exit: ExitRecord | None = None
        self.pending_orders: list[HookOrder] = []
        """Orders sent before the rank was launched (delivered to its handle)."""
        self.transition: TransitionSpec | None = None
        self.old_rank: int | None = None
        """The rank of its previous epoch (reports of that epoch arriving late keep it)."""
        """Set when a transition started this worker or moved it in place to its current epoch."""
        self.synced_it: int | None = None
        """Last iteration whose micro-batches this rank finished (it then waits for its peers)."""
        # interval statistics
        self.durations: list[float] = []
        self.computes: list[float] = []
        self.first_it: int | None = None
        self.last_it: int | None = None
        self.first_iteration = asyncio.Event()
        """Set when the worker completed its first iteration (a warm spare's replacement waits)."""
        self.mbs = 0
        self.tokens = 0
        self.flops = 0.0
        self.loss: float | None = None
        self.learning_rate: float | None = None
        self.grad_norm: float | None = None
        self.validation: tuple[int, float] | None = None
        """The latest evaluation not yet reported: (iteration, validation loss)."""
        self.loop_epoch: int | None = None
        """The epoch of this rank's latest completed iteration: it reached that epoch's training loop."""
        self.stats_epoch: int | None = None
        """The epoch of this rank's latest statistics report."""
        self.stats_at = 0.0
        self.exited = asyncio.Event()

    @property
    def pid(self) -> int | None:
        return self.handle.pid if self.handle is not None else None

    def attach(self, handle: WorkerHandle) -> None:
        self.handle = handle
        for order in self.pending_orders:
            handle.send(order)
        self.pending_orders.clear()

    def status(self) -> WorkerStatus:
        return WorkerStatus(
            task_id=self.spec.task_id,
            epoch=self.spec.epoch,
            rank=self.rank,
            device=self.device,
            pid=self.pid,
            state=self.state.value,
            iteration=self.last_it,
        )

    def reset_monitoring(self, cfg: MonitorConfig) -> None:
        """A new epoch: the iteration time changes (new DP size, new micro-batch count) and the
        first iteration recomputes lost work, so hang and straggler monitors warm up again."""
        self.monitor = RankMonitor(cfg)
        self.hang_reported = False
        self.exception_reported = False
        self.synced_it = None
        if self.state == WorkerState.UNHEALTHY:
            self.state = WorkerState.HEALTHY

    def send_order(self, order: HookOrder) -> None:
        if self.handle is not None:
            self.handle.send(order)
        else:
            self.pending_orders.append(order)

    def signal(self, sig: int) -> None:
        if self.handle is not None and self.exit is None:
            self.handle.signal(sig)

    async def capture_stack(self, wait_s: float = 0.3) -> str:
        """Python stacks of all the worker's threads (a process's: faulthandler on SIGUSR1)."""
        if self.handle is None or self.exit is not None:
            return ""
        return await self.handle.capture_stack(wait_s)


class TaskGroup:
    def __init__(
        self, spec: WorkerSpec, cfg: MonitorConfig, workers: dict[int, Worker] | None = None
    ) -> None:
        self.spec = spec
        self.workers: dict[int, Worker] = (
            {ra.rank: Worker(spec, ra.rank, ra.device, cfg) for ra in spec.launch.ranks}
            if workers is None
            else workers
        )
        self.stragglers = TaskStragglers(cfg)

    def result(self) -> RunResult:
        exits = {r: w.exit for r, w in self.workers.items() if w.exit is not None}
        states = {w.state for w in self.workers.values()}
        if WorkerState.FAILED in states:
            state = WorkerState.FAILED
        elif all(s == WorkerState.SUCCEEDED for s in states):
            state = WorkerState.SUCCEEDED
        elif all(s.is_terminal for s in states):
            state = WorkerState.STOPPED
        else:
            state = WorkerState.HEALTHY
        return RunResult(state, exits)
