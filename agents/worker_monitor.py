"""Worker monitoring in the agent: what each rank's hook events say, hangs, stragglers, statistics.

:class:`WorkerMonitor` turns the typed hook events of the local ranks (:mod:`agents.training.hook_protocol`,
from a worker's socket or a simulated worker) into the state of their :class:`~agents.workers.Worker`
records and into evidence:

- **exception propagation**: a worker's caught exception becomes a ``WorkerException`` report;
- **online statistical monitoring**: iteration timings feed a per-rank hang monitor and a per-task
  straggler detector (:mod:`agents.monitor`); before a hung worker is killed its Python stack is
  captured (``SIGUSR1`` → faulthandler) into the ``HangVerdict``. In elastic mode a rank that finished
  its micro-batches and waits in the all-reduce for a stuck peer is a victim: it is killed only if it
  is still stuck one threshold later;
- **statistics**: each rank's iteration statistics go out once per interval (``IterationStats``),
  an evaluation's loss with the report of its own iteration.

The supervisor (:mod:`agents.supervisor`) owns the workers and their lifecycle; the monitor reads them
through :class:`MonitorHost` and sends every report through it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import signal
import statistics
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol

from agents.api import WorkerState
from agents.monitor import MonitorConfig
from agents.training.hook_protocol import (
    AwaitingOrder,
    CheckpointDone,
    ComputeDone,
    Evaluated,
    ExceptionRaised,
    HookEvent,
    IterationEnd,
    IterationStart,
    MicroBatchDone,
    SlowPhase,
    TrainingDone,
    TransitionDone,
)
from agents.workers import TaskGroup, Worker
from controlplane.core.failures.detectors import waits_on_peers
from controlplane.core.protocol import (
    CheckpointSaved,
    Detector,
    HangVerdict,
    IterationStats,
    StragglerVerdict,
    WorkerEvent,
    WorkerException,
)

log = logging.getLogger("agents.supervisor")

STATS_INTERVAL_S = 1.0
QUIET_STATS_INTERVAL_S = 10.0
"""Ranks other than the first and the last report their statistics this often (the first report of each
epoch at once: the transition's resume step waits for every rank's). Rank 0's rates and the last rank's
loss are what the control plane shows; the others' reports only advance progress, and at one a second from
every rank a node of 8 GPUs sent 9 messages a second instead of 1."""


class MonitorHost(Protocol):
    """What the monitor needs of the supervisor that owns the workers."""

    @property
    def groups(self) -> Mapping[str, TaskGroup]:
        """The local ranks of every task, by task id."""
        ...

    def report(
        self,
        w: Worker,
        event: WorkerEvent,
        detector: Detector | None,
        occurred: float | None = None,
        epoch: int | None = None,
        rank: int | None = None,
    ) -> None:
        """Send ``event`` of worker ``w`` as evidence (``epoch``/``rank``: a late report of its old epoch)."""
        ...


class WorkerMonitor:
    """Hook events, hang and straggler checks and statistics of the local workers of one agent.

    A hung worker is killed (``SIGKILL``) after its verdict unless ``kill_hung`` is false;
    ``elastic_wait_s`` > 0 is the supervisor's elastic mode (victims of a hung peer are spared a while)."""

    def __init__(self, host: MonitorHost, cfg: MonitorConfig, kill_hung: bool, elastic_wait_s: float) -> None:
        self.host = host
        self.cfg = cfg
        self.kill_hung = kill_hung
        self.elastic_wait_s = elastic_wait_s
        self.on_hook_delay: Callable[[float], None] | None = None
        """Seconds from a worker stamping a hook event to its handling (the agent's metrics)."""
        self._last_flush = time.time()
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Check for hangs every ``poll_s`` and flush statistics every interval until :meth:`close`."""
        self._spawn(self._loop())

    def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ hook events
    def on_event(self, w: Worker, ev: HookEvent) -> None:
        """A decoded hook event of worker ``w`` (from its socket, or from a simulated worker)."""
        stamped = getattr(ev, "t", None)
        if self.on_hook_delay is not None and stamped is not None:
            self.on_hook_delay(time.time() - stamped)
        handler = self._EVENT_HANDLERS.get(ev.ev)
        if handler is None:
            log.warning("hook event %r is not expected from a worker", ev.ev)
            return
        handler(self, w, ev)

    def _stale(self, w: Worker, ep: int | None) -> bool:
        """An event of the worker's previous epoch arriving after it was moved to a new one."""
        return ep is not None and ep < w.spec.epoch

    def _ev_iter_start(self, w: Worker, ev: IterationStart) -> None:
        if self._stale(w, ev.ep):
            return
        w.iteration = ev.it
        w.iter_start = ev.t
        w.phase = ev.phase
        if w.state == WorkerState.INIT:
            w.state = WorkerState.HEALTHY

    def _ev_iter_end(self, w: Worker, ev: IterationEnd) -> None:
        if self._stale(w, ev.ep):
            w.iter_start = None  # the old epoch's last iteration: its statistics went out at the re-key
            return
        it, dur, phase, compute = ev.it, ev.dur, ev.phase, ev.compute
        w.iter_start = None
        w.loop_epoch = w.spec.epoch
        w.first_iteration.set()
        w.monitor.observe(dur, phase)
        if w.first_it is None:
            w.first_it = it
        w.last_it = it
        w.durations.append(dur)
        w.computes.append(compute)
        w.mbs += ev.mbs
        w.tokens += ev.tokens or 0
        w.flops += ev.flops or 0.0
        if ev.loss is not None:
            w.loss = ev.loss
        if ev.lr is not None:
            w.learning_rate = ev.lr
        if ev.grad_norm is not None and math.isfinite(ev.grad_norm):
            w.grad_norm = ev.grad_norm
        group = self.host.groups.get(w.spec.task_id)
        if group is None:
            return
        verdict = group.stragglers.observe(w.rank, compute, phase)
        if verdict is not None:
            if w.state == WorkerState.HEALTHY:
                w.state = WorkerState.UNHEALTHY
            self.host.report(
                w,
                StragglerVerdict(
                    iteration=it,
                    compute_s=verdict.rank_median_s,
                    peer_median_s=verdict.peer_median_s,
                    ratio=verdict.ratio,
                ),
                "statistical_monitoring",
            )

    def _ev_mb(self, w: Worker, ev: MicroBatchDone) -> None:
        pass  # counted at iteration end; the event keeps the micro-batch's global identity flowing

    def _ev_sync(self, w: Worker, ev: ComputeDone) -> None:
        if ev.it is not None:
            w.synced_it = ev.it

    def _ev_await(self, w: Worker, ev: AwaitingOrder) -> None:
        """The worker's collective failed; it waits for a transition order, not in an iteration."""
        w.iter_start = None
        w.slow_phase = None
        w.phase = "await"

    def _ev_transition(self, w: Worker, ev: TransitionDone) -> None:
        self.host.report(w, ev.report, None, ev.t, epoch=ev.ep)

    def _ev_checkpoint(self, w: Worker, ev: CheckpointDone) -> None:
        report = CheckpointSaved(iteration=ev.it, path=ev.path, size_bytes=ev.size_bytes)
        self.host.report(w, report, None, ev.t, epoch=ev.ep)

    def _ev_eval(self, w: Worker, ev: Evaluated) -> None:
        """An evaluation's loss goes out in a report of its own iteration: the statistics so far are
        flushed with it (a report carries one validation loss: a pending one goes out first)."""
        if self._stale(w, ev.ep) or not math.isfinite(ev.loss):
            return
        if w.validation is not None:
            self.flush_stats(w)
        w.validation = (ev.it, ev.loss)
        self.flush_stats(w)

    def _ev_phase(self, w: Worker, ev: SlowPhase) -> None:
        if ev.state == "begin":
            w.slow_phase = ev.phase
            w.slow_since = ev.t
        else:
            w.slow_phase = None

    def _ev_exception(self, w: Worker, ev: ExceptionRaised) -> None:
        stale = self._stale(w, ev.ep)
        if not stale:
            w.exception_reported = True
        self.host.report(
            w,
            WorkerException(
                exc_type=ev.type,
                message=ev.msg,
                traceback=ev.tb,
                iteration=ev.it,
                in_collective=ev.in_collective,
                waiting=ev.waiting,
            ),
            "exception_propagation",
            ev.t,
            epoch=ev.ep if stale else None,
            rank=w.old_rank if stale else None,
        )

    def _ev_done(self, w: Worker, ev: TrainingDone) -> None:
        w.finished = True

    _EVENT_HANDLERS: dict[str, Callable[[WorkerMonitor, Worker, Any], None]] = {
        "iter_start": _ev_iter_start,
        "iter_end": _ev_iter_end,
        "mb": _ev_mb,
        "phase": _ev_phase,
        "eval": _ev_eval,
        "exception": _ev_exception,
        "done": _ev_done,
        "sync": _ev_sync,
        "await": _ev_await,
        "transition": _ev_transition,
        "checkpoint": _ev_checkpoint,
    }
    """The events of a bound worker, by their ``ev`` (hello, spare and drill frames come before)."""

    # ------------------------------------------------------------------ hangs and statistics
    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.poll_s)
            now = time.time()
            for group in list(self.host.groups.values()):
                for w in group.workers.values():
                    if not w.state.is_running or w.exit is not None:
                        continue
                    self.check_hang(w, now)
            if now - self._last_flush >= STATS_INTERVAL_S:
                self._last_flush = now
                for group in self.host.groups.values():
                    for w in group.workers.values():
                        self.flush_stats(w)

    def check_hang(self, w: Worker, now: float) -> None:
        if w.hang_reported:
            return
        if w.slow_phase is not None:
            hang = w.monitor.check(now - w.slow_since, w.slow_phase)
            it = w.iteration if w.iteration is not None else -1
        elif w.iter_start is not None:
            hang = w.monitor.check(now - w.iter_start, w.phase)
            it = w.iteration if w.iteration is not None else -1
        else:
            return
        if hang is None:
            return
        w.state = WorkerState.UNHEALTHY
        w.hang_reported = True
        self._spawn(self._handle_hang(w, it, hang.elapsed_s, hang.threshold_s, hang.median_s, hang.phase))

    async def _handle_hang(
        self, w: Worker, it: int, elapsed: float, threshold: float, median: float | None, phase: str
    ) -> None:
        in_collective = self.elastic_wait_s > 0 and w.synced_it == it and w.slow_phase is None
        if in_collective:
            # A victim: it finished its micro-batches and waits in the all-reduce for a stuck peer.
            # The culprit's agent kills the culprit and this rank's collective then fails fast; kill
            # it only if it is still stuck in the same iteration one threshold later.
            await asyncio.sleep(threshold)
            if w.exit is not None or w.iteration != it or w.iter_start is None:
                w.hang_reported = False
                if w.state == WorkerState.UNHEALTHY and w.exit is None:
                    w.state = WorkerState.HEALTHY
                return
            elapsed += threshold
        stack = await w.capture_stack()
        # waiting for its peers: in the all-reduce after its micro-batches (a victim), or blocked in a
        # pipeline send/receive or another collective (its stack says so): a consequence, not its fault
        in_collective = in_collective or waits_on_peers(stack)
        self.host.report(
            w,
            HangVerdict(
                iteration=it,
                elapsed_s=elapsed,
                threshold_s=threshold,
                median_iteration_s=median,
                phase=phase if phase in ("train", "first", "checkpoint", "evaluation") else "train",
                stack=stack,
                in_collective=in_collective,
            ),
            "statistical_monitoring",
            (w.iter_start or time.time()) + threshold,
        )
        if self.kill_hung:
            w.signal(signal.SIGKILL)

    def flush_stats(self, w: Worker) -> None:
        if not w.durations or w.first_it is None or w.last_it is None:
            return
        now = time.monotonic()
        shown = w.rank in (0, w.spec.launch.world_size - 1)  # rates and loss: every interval
        if not shown and w.stats_epoch == w.spec.epoch and now - w.stats_at < QUIET_STATS_INTERVAL_S:
            return  # the interval goes on accumulating
        w.stats_epoch, w.stats_at = w.spec.epoch, now
        self.host.report(
            w,
            IterationStats(
                first_iteration=w.first_it,
                last_iteration=w.last_it,
                iterations=len(w.durations),
                median_s=statistics.median(w.durations),
                max_s=max(w.durations),
                compute_median_s=statistics.median(w.computes),
                micro_batches=w.mbs,
                tokens=w.tokens,
                model_flops=w.flops,
                loss=w.loss,
                validation_loss=w.validation[1] if w.validation is not None else None,
                validation_iteration=w.validation[0] if w.validation is not None else None,
                learning_rate=w.learning_rate,
                grad_norm=w.grad_norm,
            ),
            None,
        )
        w.validation = None
        w.durations, w.computes, w.first_it, w.mbs, w.tokens, w.flops = [], [], None, 0, 0, 0.0
