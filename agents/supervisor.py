"""The local supervisor: starts a task's workers, watches them, turns what it sees into evidence.

Three of the four in-band detectors run here (the fourth, node health, runs on the coordinator):

- **process supervision**: every worker is a child process; ``await proc.wait()`` wakes the agent
  as soon as it exits, and the exit code / signal is reported (``WorkerExited``);
- **exception propagation**: the worker's hook forwards caught exceptions over the Unix socket
  (``WorkerException``), then leaves with :data:`~agents.training.hook.EXIT_EXCEPTION`;
- **online statistical monitoring**: iteration timings from the hook feed a per-rank hang monitor
  and a per-task straggler detector (:mod:`agents.monitor`); before a hung worker is killed its
  Python stack is captured (``SIGUSR1`` → faulthandler) into the ``HangVerdict``.

Workers are either real processes (``megatron``) or in-agent simulated workers (``sim``,
:mod:`agents.sim`); both feed :meth:`Supervisor.on_event` with the same hook events.

Transitions (docs/ARCHITECTURE.md §7.6): :meth:`Supervisor.reconfigure_group` moves a task to a new epoch. A
surviving worker keeps its process: the supervisor re-keys it under its new rank and epoch (its
reports carry them from then on; reports of its old epoch that arrive late keep the old epoch, the
hook tags them), resets its hang/straggler warm-up, and sends it a transition order down the hook
socket. Only ranks without a live local process start fresh; local workers the new epoch does not
list are stopped. In elastic mode (``elastic_wait_s > 0``) a worker whose collective failed reports
the exception and waits for that order instead of exiting; the hang monitor then kills only the rank
that did not finish its micro-batches, not the peers waiting for it in the all-reduce (victims are
killed only if still stuck one threshold later).

Warm spares (:mod:`agents.training.spare`): with ``spares`` > 0 the supervisor keeps that many
pre-started worker processes that have imported torch and Megatron-Core, connected to the hook
socket and block waiting for an assignment. Wherever a worker process would be launched
(StartWorkers, a restarted or added rank in Reconfigure, a dead rank in Retry) a ready spare gets the
rank's assignment and environment over its hook connection instead, and from then on is that rank's
worker (same pid supervision, log file, stack file, session, PDEATHSIG); a replacement spare starts
once the new worker has finished its first iteration (or after ``spare_refill_s``), so its imports do
not compete with the transition for the CPU. No ready spare: a fresh process, as before. Spares are
not workers: they appear in no status or heartbeat, and they are killed when the agent stops (and by
PDEATHSIG when it dies). Their pids and RSS are listed in ``RUN_DIR/spares.json``.

The spare zygote (``zygote=True``, :mod:`agents.training.zygote`, :mod:`agents.zygote_link`): instead of
each spare importing torch and Megatron-Core itself (3.6 s on a quiet CPU box, ~30 s on a loaded
2-core one, on the cores the training uses), one zygote process imports them once and forks each spare
in milliseconds. The agent makes itself a child subreaper, so a forked spare is re-parented to it and
supervised like any other child (:class:`~agents.zygote_link.AdoptedProcess`); a spare taken from the
zygote is replaced at once. If the zygote cannot start, dies or fails a fork, spares are started as
fresh processes again. Processes orphaned below the agent (a killed worker's helper processes) are
re-parented to it too: :meth:`Supervisor._reap_orphans` reaps those that exit.

Warming (:attr:`Supervisor.warming`): from its start until the first spare is ready (or spare starts
give up, or :data:`WARMING_MAX_S` passed) the supervisor is *warming*: a rank placed on this node now
would start cold. The agent says so in Hello and Heartbeat, and the coordinator does not count a
returning node as healthy (no new ranks there) until it is warm. Warming ends once, for good: a spare
handed out later does not make the node warming again. ``on_warm`` is called when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agents.api import ExitRecord, RunResult, WorkerSpec, WorkerState
from agents.monitor import MonitorConfig, RankMonitor, TaskStragglers
from agents.prctl import die_with_parent, session_of, zombie_children
from agents.sim import SimWorker
from agents.training.cpu_bind import worker_nice
from agents.training.elastic import TransitionSpec
from agents.training.hook import ENV_RANK, ENV_SOCKET, ENV_STACK_FILE
from agents.training.spare import rss_kb
from agents.training.worker import ENV_ELASTIC_WAIT, ENV_WORKER, WorkerAssignment
from agents.zygote_link import AdoptedProcess, ChildProcess, ZygoteError, ZygoteLink, can_adopt
from controlplane.core.protocol import (
    Detector,
    FaultSpec,
    HangVerdict,
    IterationStats,
    StragglerVerdict,
    TransitionReport,
    WorkerEvent,
    WorkerException,
    WorkerExited,
    WorkerReport,
    WorkerStarted,
    WorkerStatus,
)

log = logging.getLogger("agents.supervisor")

Emit = Callable[[WorkerReport], None]
STATS_INTERVAL_S = 1.0
SPARE_START_FAILURES = 3
"""Consecutive spares that die before becoming ready: stop starting spares (fresh processes only)."""
WARMING_MAX_S = 30.0
"""An agent with spares reports ``warming`` (Hello/Heartbeat) until its first spare is ready, spare
starts give up, or this long after the supervisor started, whichever comes first: the coordinator keeps
a returning node ``joining`` meanwhile, and this bound keeps a node whose spares never get ready from
staying out of service longer than that."""


def _ts(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def _prepare_child() -> None:  # pragma: no cover - runs in the child
    """Worker dies with its agent (a node's agent gone means the node is gone); it runs at the nice value
    of ``UNICRON_WORKER_NICE`` (checked when the agent started)."""
    die_with_parent()
    nice = worker_nice()
    if nice:
        os.nice(nice)


class Worker:
    """One rank on this node: its process (or simulation), state and monitoring data."""

    def __init__(self, spec: WorkerSpec, rank: int, device: int, cfg: MonitorConfig) -> None:
        self.spec = spec
        self.rank = rank
        self.device = device
        self.state = WorkerState.INIT
        self.pid: int | None = None
        self.proc: ChildProcess | None = None
        self.sim: SimWorker | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.stack_file: Path | None = None
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
        self.pending_orders: list[dict[str, Any]] = []
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
        self.exited = asyncio.Event()

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

    def send_order(self, order: dict[str, Any]) -> None:
        if self.sim is not None:
            self.sim.order(order)
        elif self.writer is not None:
            self.writer.write((json.dumps(order) + "\n").encode())
        else:
            self.pending_orders.append(order)

    def signal(self, sig: int) -> None:
        if self.sim is not None:
            self.sim.signal(sig)
            return
        if self.pid is None or self.exit is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)  # the worker leads its own session: its helpers die too

    async def capture_stack(self, wait_s: float = 0.3) -> str:
        """Python stacks of all the worker's threads (faulthandler on SIGUSR1)."""
        if self.sim is not None:
            return str(self.sim.stack())
        if self.pid is None or self.stack_file is None or self.exit is not None:
            return ""
        before = self.stack_file.stat().st_size if self.stack_file.exists() else 0
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGUSR1)
        deadline = time.monotonic() + wait_s
        text = ""
        while time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            if self.stack_file.exists() and self.stack_file.stat().st_size > before:
                await asyncio.sleep(0.03)  # let faulthandler finish writing
                with open(self.stack_file) as fh:
                    fh.seek(before)
                    text = fh.read()
                break
        return text


@dataclass
class Spare:
    """A warm spare worker process (:mod:`agents.training.spare`) owned by the supervisor."""

    proc: ChildProcess
    log_path: Path
    started: float
    origin: str = "exec"
    """``exec``: a fresh process that imports everything itself; ``zygote``: forked by the zygote."""
    writer: asyncio.StreamWriter | None = None
    """Its hook connection; set when it announced itself ready."""
    ready_s: float | None = None
    """Seconds its imports took (reported by the spare)."""
    rss_kb: int = 0
    """Its resident memory when it became ready."""
    assigned: bool = False

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    @property
    def ready(self) -> bool:
        return (
            self.writer is not None
            and not self.assigned
            and self.proc.returncode is None
            and not self.writer.is_closing()
        )


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


class Supervisor:
    """Owns all local workers of all tasks on this node."""

    def __init__(
        self,
        emit: Emit,
        worker_kind: str = "megatron",
        monitor: MonitorConfig | None = None,
        kill_hung: bool = True,
        run_dir: Path | None = None,
        worker_env: dict[str, str] | None = None,
        node: str = "",
        elastic_wait_s: float = 0.0,
        spares: int = 0,
        spare_refill_s: float = 10.0,
        zygote: bool = False,
    ) -> None:
        """``elastic_wait_s`` > 0: elastic mode (workers survive collective errors and wait this long
        for a transition order; transitions reuse live processes). ``spares``: warm spare worker
        processes to keep (real workers only; 0: none); a used spare is replaced when its worker
        finished its first iteration, or ``spare_refill_s`` after it was handed out. ``zygote``: fork the
        spares from a zygote that imported everything once (this process becomes a child subreaper)."""
        self.emit_report = emit
        self.node = node
        self.elastic_wait_s = elastic_wait_s
        self.worker_kind = worker_kind
        self.cfg = monitor or MonitorConfig()
        self.kill_hung = kill_hung
        self.run_dir = run_dir or Path(tempfile.mkdtemp(prefix="unicron-agent-"))
        self.socket_path = self.run_dir / "hook.sock"
        if len(str(self.socket_path)) > 100:  # AF_UNIX path limit (108 bytes)
            self.socket_path = Path(tempfile.mkdtemp(prefix="uc-")) / "hook.sock"
        self.worker_env = worker_env or {}
        self.groups: dict[str, TaskGroup] = {}
        self._by_pid: dict[int, Worker] = {}
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._last_flush = time.time()
        self.drill: Callable[[str | None, FaultSpec], str] | None = None
        """Set by the agent: runs a fault drill (also node_loss) from the local drill CLI."""
        self.spare_count = spares if worker_kind == "megatron" else 0
        self.spare_refill_s = spare_refill_s
        self.spares: dict[int, Spare] = {}
        """Spare processes not yet handed out (starting or ready), by pid."""
        self._spare_seq = 0
        self._spare_failures = 0
        self._refills = 0
        """Refills scheduled and not yet started (they count toward ``spare_count``)."""
        self._starting = 0
        """Spare starts in progress (a fork or exec awaited; they count toward ``spare_count``)."""
        self.zygote_wanted = zygote and self.spare_count > 0
        self.zygote: ZygoteLink | None = None
        self._early_spares: dict[int, tuple[dict[str, Any], asyncio.StreamWriter]] = {}
        """Hellos of forked spares that arrived before the zygote's answer named their pid."""
        self._closing = False
        self.started_at: float | None = None
        """``time.monotonic()`` when :meth:`start` ran (the warming bound counts from it)."""
        self.warming_max_s = WARMING_MAX_S
        self._warm = self.spare_count == 0
        """Warming is over (latched; see :attr:`warming`)."""
        self.on_warm: Callable[[], None] | None = None
        """Set by the agent: called once when warming ends (it sends a heartbeat at once)."""
        self.on_hook_delay: Callable[[float], None] | None = None
        """Set by the agent's metrics: seconds from a worker stamping a hook event to its handling."""

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self.started_at = time.monotonic()
        self._server = await asyncio.start_unix_server(self._serve_hook, path=str(self.socket_path))
        self._spawn(self._monitor_loop())
        if not self._warm:
            self._spawn(self._warming_bound())
        if self.zygote_wanted:
            await self._start_zygote()
        await self._fill_spares()

    async def close(self) -> None:
        self._closing = True
        for group in list(self.groups.values()):
            await self.stop_group(group.spec.task_id, grace_s=0.0)
        await self._kill_spares()
        if self.zygote is not None:
            await self.zygote.close()
        for t in list(self._tasks):
            t.cancel()
        if self._server is not None:
            self._server.close()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def statuses(self) -> list[WorkerStatus]:
        return [w.status() for g in self.groups.values() for w in g.workers.values()]

    def kill_everything(self) -> None:
        """Node loss drill: SIGKILL every worker at once (the caller then dies too)."""
        for g in self.groups.values():
            for w in g.workers.values():
                w.signal(signal.SIGKILL)
        for sp in self.spares.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(sp.pid, signal.SIGKILL)
        if self.zygote is not None:
            self.zygote.kill()

    # ------------------------------------------------------------------ warm spares
    @property
    def warming(self) -> bool:
        """Spares are configured and none has been ready yet since the start (spare starts have not
        given up and :data:`WARMING_MAX_S` has not passed). False for good once it was False."""
        if self._warm:
            return False
        if self._spare_failures >= SPARE_START_FAILURES:
            self._end_warming("spare starts gave up")
        elif self.started_at is not None and time.monotonic() - self.started_at >= self.warming_max_s:
            self._end_warming(f"no spare ready after {self.warming_max_s:g} s")
        return not self._warm

    def _end_warming(self, why: str) -> None:
        if self._warm:
            return
        self._warm = True
        since = time.monotonic() - self.started_at if self.started_at is not None else 0.0
        log.info("warming over after %.2f s: %s", since, why)
        if self.on_warm is not None:
            self.on_warm()

    async def _warming_bound(self) -> None:
        await asyncio.sleep(self.warming_max_s)
        _ = self.warming  # ends it (and tells the agent) if nothing else did

    def _worker_base_env(self) -> dict[str, str]:
        """What every worker process's environment has, whichever rank it runs."""
        env = dict(os.environ)
        env.update(
            {
                ENV_SOCKET: str(self.socket_path),
                "OMP_NUM_THREADS": "1",
                "MKL_NUM_THREADS": "1",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.worker_env)
        return env

    async def _start_zygote(self) -> None:
        why_not = can_adopt()
        if why_not is not None:
            log.warning("no spare zygote: %s; spares start as fresh processes", why_not)
            return
        self.zygote = ZygoteLink(self.run_dir, self._worker_base_env(), _prepare_child)
        await self.zygote.start()
        self._spawn(self._zygote_ready(self.zygote))
        self._spawn(self._watch_zygote(self.zygote))
        self._spawn(self._reap_orphans())

    async def _zygote_ready(self, zygote: ZygoteLink) -> None:
        await zygote.wait_ready()  # ready or gone: either way the spares can start now
        self._write_spares()
        await self._fill_spares()

    async def _watch_zygote(self, zygote: ZygoteLink) -> None:
        await zygote.watch()
        self._write_spares()

    def _zygote_starting(self) -> bool:
        return self.zygote is not None and self.zygote.state == "starting"

    async def _reap_orphans(self, every_s: float = 5.0) -> None:
        """Reap exited processes that were orphaned below the agent and re-parented to it (a subreaper),
        such as a killed worker's checkpoint helpers. Only processes of another session than the agent's,
        and none the supervisor waits for itself."""
        own_session = os.getsid(0)
        while not self._closing:
            await asyncio.sleep(every_s)
            if self.zygote is not None and self.zygote.forking:
                continue  # a spare that died at once is ours before the zygote's answer names it
            zombies = zombie_children()
            if not zombies:
                continue
            owned = set(self._by_pid) | set(self.spares)
            owned |= {w.pid for g in self.groups.values() for w in g.workers.values() if w.pid is not None}
            if self.zygote is not None and self.zygote.pid is not None:
                owned.add(self.zygote.pid)
            for pid in zombies:
                if pid in owned or session_of(pid) in (None, own_session):
                    continue
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                    log.info("reaped orphan %s", pid)

    async def _fill_spares(self) -> None:
        """Start spares until ``spare_count`` exist (counting scheduled refills); none while the zygote
        is still importing (it starts them when it is ready)."""
        if self._zygote_starting():
            return
        while (
            not self._closing
            and self._spare_failures < SPARE_START_FAILURES
            and len(self.spares) + self._refills + self._starting < self.spare_count
        ):
            self._starting += 1
            try:
                await self._start_spare()
            finally:
                self._starting -= 1

    async def _start_spare(self) -> None:
        self._spare_seq += 1
        log_path = self.run_dir / f"spare-{self._spare_seq}.log"
        if self.zygote is not None and self.zygote.ready:
            try:
                pid = await self.zygote.fork(log_path)
            except ZygoteError:
                pass  # logged; a fresh process below
            else:
                try:
                    adopted = AdoptedProcess(pid)
                except ProcessLookupError:  # reaped already: never seen on Linux, but not a crash
                    log.warning("forked spare %s vanished before the agent adopted it", pid)
                    self._spare_failures += 1
                    return
                sp = Spare(proc=adopted, log_path=log_path, started=time.time(), origin="zygote")
                self.spares[sp.pid] = sp
                self._write_spares()
                self._spawn(self._watch_spare(sp))
                early = self._early_spares.pop(pid, None)
                if early is not None:
                    self._spare_ready(*early)
                return
        with open(log_path, "ab") as logf:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "agents.training.spare",
                env=self._worker_base_env(),
                stdout=logf,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_prepare_child,
            )
        sp = Spare(proc=proc, log_path=log_path, started=time.time())
        self.spares[sp.pid] = sp
        self._write_spares()
        self._spawn(self._watch_spare(sp))

    async def _watch_spare(self, sp: Spare) -> None:
        code = await sp.proc.wait()
        if sp.assigned:
            return  # its worker's own watcher reports the exit
        self.spares.pop(sp.pid, None)
        self._write_spares()
        if self._closing:
            return
        if sp.writer is None:
            self._spare_failures += 1
            if self._spare_failures >= SPARE_START_FAILURES:
                self._end_warming("spare starts gave up")
        log.warning("spare %s exited (rc %s) before it was used; see %s", sp.pid, code, sp.log_path)
        await self._fill_spares()

    def _spare_ready(self, event: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        sp = self.spares.get(int(event["pid"]))
        if sp is None and self.zygote is not None and self.zygote.ready:
            self._early_spares[int(event["pid"])] = (event, writer)  # the zygote's answer is on its way
            return
        if sp is None:
            log.warning("spare hello from unknown pid %s", event.get("pid"))
            writer.close()
            return
        sp.writer = writer
        sp.ready_s = float(event.get("ready_s", 0.0))
        sp.rss_kb = int(event.get("rss_kb", 0)) or rss_kb(sp.pid)
        self._spare_failures = 0
        log.info("spare %s (%s) ready after %.3f s (rss %d KiB)", sp.pid, sp.origin, sp.ready_s, sp.rss_kb)
        self._write_spares()
        self._end_warming(f"spare {sp.pid} ready")

    def _take_spare(self) -> Spare | None:
        for sp in list(self.spares.values()):
            if sp.ready:
                sp.assigned = True
                self.spares.pop(sp.pid, None)
                return sp
        return None

    async def _refill_after(self, w: Worker) -> None:
        """Replace a used spare once its worker finished its first iteration (or left, or after
        ``spare_refill_s``): the new spare's imports then do not slow the transition down."""
        self._refills += 1
        try:
            waits = [asyncio.ensure_future(e.wait()) for e in (w.first_iteration, w.exited)]
            try:
                await asyncio.wait(waits, timeout=self.spare_refill_s, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in waits:
                    t.cancel()
        finally:
            self._refills -= 1
        await self._fill_spares()

    def spare_info(self) -> list[dict[str, Any]]:
        """Spares not yet handed out: pid, ready, import seconds, RSS (KiB, now)."""
        return [
            {
                "pid": sp.pid,
                "ready": sp.ready,
                "ready_s": sp.ready_s,
                "rss_kb": rss_kb(sp.pid) if sp.proc.returncode is None else 0,
                "log": str(sp.log_path),
                "origin": sp.origin,
            }
            for sp in self.spares.values()
        ]

    def _write_spares(self) -> None:
        """``RUN_DIR/spares.json``: the spares now (for operators, tests and benchmarks)."""
        path = self.run_dir / "spares.json"
        tmp = path.with_suffix(".json.tmp")
        with contextlib.suppress(OSError):
            zygote = self.zygote.info() if self.zygote is not None else None
            tmp.write_text(json.dumps({"spares": self.spare_info(), "zygote": zygote, "at": time.time()}))
            tmp.replace(path)

    async def _kill_spares(self) -> None:
        spares = list(self.spares.values())
        for sp in spares:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(sp.pid, signal.SIGKILL)
        for sp in spares:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(sp.proc.wait(), timeout=5)
        self.spares.clear()
        self._write_spares()

    # ------------------------------------------------------------------ evidence
    def _report(
        self,
        w: Worker,
        event: WorkerEvent,
        detector: Detector | None,
        occurred: float | None = None,
        epoch: int | None = None,
        rank: int | None = None,
    ) -> None:
        now = time.time()
        self.emit_report(
            WorkerReport(
                report_id=str(uuid.uuid4()),
                task_id=w.spec.task_id,
                epoch=w.spec.epoch if epoch is None else epoch,
                rank=w.rank if rank is None else rank,
                device=w.device,
                detector=detector,
                occurred_at=_ts(occurred if occurred is not None else now),
                detected_at=_ts(now),
                event=event,
            )
        )

    # ------------------------------------------------------------------ launching
    async def start_group(self, spec: WorkerSpec) -> TaskGroup:
        old = self.groups.get(spec.task_id)
        if old is not None:
            await self.stop_group(spec.task_id, grace_s=1.0)
        group = TaskGroup(spec, self.cfg)
        self.groups[spec.task_id] = group
        for w in group.workers.values():
            await self._start_worker(w)
        return group

    async def _start_worker(self, w: Worker) -> None:
        if w.spec.kind == "sim":
            w.sim = SimWorker(self, w)
            w.pid = None
            self._report(w, WorkerStarted(pid=os.getpid()), None)
            self._spawn(self._watch_sim(w))
        else:
            await self._launch_process(w)

    async def _launch_process(self, w: Worker) -> None:
        spec = w.spec
        assign = WorkerAssignment(
            task_id=spec.task_id,
            epoch=spec.epoch,
            rank=w.rank,
            device=w.device,
            launch=spec.launch,
            node=self.node,
            transition=w.transition,
        )
        w.stack_file = self.run_dir / f"stack-{spec.task_id}-e{spec.epoch}-r{w.rank}.txt"
        rank_env = {
            ENV_WORKER: assign.model_dump_json(),
            ENV_STACK_FILE: str(w.stack_file),
            ENV_RANK: str(w.rank),
            ENV_ELASTIC_WAIT: str(self.elastic_wait_s),
            **self.worker_env,
        }
        log_path = self.run_dir / f"worker-{spec.task_id}-e{spec.epoch}-r{w.rank}.log"
        spare = self._take_spare()
        if spare is not None and spare.writer is not None:
            # Register the pid first: the worker's hello on this connection binds it to ``w``.
            proc = spare.proc
            self._by_pid[proc.pid] = w
            msg = {"assign": {"env": rank_env, "log": str(log_path)}}
            spare.writer.write((json.dumps(msg) + "\n").encode())
            log.info("rank %s of %s epoch %s: warm spare %s", w.rank, spec.task_id, spec.epoch, proc.pid)
            self._write_spares()
            if spare.origin == "zygote" and self.zygote is not None and self.zygote.ready:
                self._spawn(self._fill_spares())  # a fork costs milliseconds: replace it at once
            else:
                self._spawn(self._refill_after(w))
        else:
            env = self._worker_base_env()
            env.update(rank_env)
            with open(log_path, "ab") as logf:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "agents.training.worker",
                    env=env,
                    stdout=logf,
                    stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=_prepare_child,
                )
        w.proc = proc
        w.pid = proc.pid
        self._by_pid[proc.pid] = w
        self._report(w, WorkerStarted(pid=proc.pid), None)
        self._spawn(self._watch_process(w))

    # ------------------------------------------------------------------ process supervision
    async def _watch_process(self, w: Worker) -> None:
        assert w.proc is not None
        code = await w.proc.wait()
        self._on_exit(w, code)

    async def _watch_sim(self, w: Worker) -> None:
        assert w.sim is not None
        code = await w.sim.run()
        self._on_exit(w, code)

    def _on_exit(self, w: Worker, code: int) -> None:
        now = time.time()
        sig = -code if code < 0 else None
        exit_code = None if code < 0 else code
        expected = w.expected_exit or (code == 0 and w.finished)
        w.exit = ExitRecord(w.rank, exit_code, sig, expected)
        if w.expected_exit:
            w.state = WorkerState.STOPPED
        elif code == 0:
            w.state = WorkerState.SUCCEEDED
        else:
            w.state = WorkerState.FAILED
        self._flush_stats(w)
        self._report(
            w,
            WorkerExited(
                exit_code=exit_code,
                signal=sig,
                signal_name=signal.Signals(sig).name if sig else None,
                expected=expected,
            ),
            None if expected else "process_supervision",
            now,
        )
        w.exited.set()
        if w.pid is not None:
            self._by_pid.pop(w.pid, None)

    # ------------------------------------------------------------------ hook link
    async def _serve_hook(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        w: Worker | None = None
        try:
            while line := await reader.readline():
                event = json.loads(line)
                if w is None:
                    if event.get("ev") == "drill":
                        await self._serve_drill(event, writer)
                        return
                    if event.get("ev") == "spare":
                        # A warm spare: the connection stays unbound until its worker says hello.
                        self._spare_ready(event, writer)
                        continue
                    if event.get("ev") != "hello":
                        continue
                    w = self._by_pid.get(int(event["pid"]))
                    if w is None:
                        log.warning("hook hello from unknown pid %s", event.get("pid"))
                        return
                    w.writer = writer
                    for order in w.pending_orders:
                        w.send_order(order)
                    w.pending_orders.clear()
                    continue
                self.on_event(w, event)
        except (ConnectionError, ValueError) as exc:
            log.warning("hook link error: %s", exc)
        finally:
            if w is not None:
                w.writer = None
            writer.close()

    async def _serve_drill(self, event: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        """Local drill CLI (``python -m agents.drill``): inject a fault without the coordinator."""
        try:
            if self.drill is None:
                raise RuntimeError("drills are not enabled")
            result = {
                "ok": True,
                "detail": self.drill(event.get("task_id"), FaultSpec.model_validate(event["fault"])),
            }
        except Exception as exc:
            result = {"ok": False, "detail": f"{type(exc).__name__}: {exc}"}
        writer.write((json.dumps(result) + "\n").encode())
        await writer.drain()

    def on_event(self, w: Worker, ev: dict[str, Any]) -> None:
        kind = ev.get("ev")
        stamped = ev.get("t")
        if self.on_hook_delay is not None and isinstance(stamped, int | float):
            self.on_hook_delay(time.time() - stamped)
        handler = self._EVENT_HANDLERS.get(str(kind))
        if handler is None:
            log.warning("unknown hook event %r", kind)
            return
        handler(self, w, ev)

    def _stale(self, w: Worker, ev: dict[str, Any]) -> bool:
        """An event of the worker's previous epoch arriving after it was moved to a new one."""
        ep = ev.get("ep")
        return ep is not None and int(ep) < w.spec.epoch

    def _ev_iter_start(self, w: Worker, ev: dict[str, Any]) -> None:
        if self._stale(w, ev):
            return
        w.iteration = int(ev["it"])
        w.iter_start = float(ev["t"])
        w.phase = str(ev.get("phase", "train"))
        if w.state == WorkerState.INIT:
            w.state = WorkerState.HEALTHY

    def _ev_iter_end(self, w: Worker, ev: dict[str, Any]) -> None:
        if self._stale(w, ev):
            w.iter_start = None  # the old epoch's last iteration: its statistics went out at the re-key
            return
        it, dur, phase = int(ev["it"]), float(ev["dur"]), str(ev.get("phase", "train"))
        compute = float(ev.get("compute", dur))
        w.iter_start = None
        w.first_iteration.set()
        w.monitor.observe(dur, phase)
        if w.first_it is None:
            w.first_it = it
        w.last_it = it
        w.durations.append(dur)
        w.computes.append(compute)
        w.mbs += int(ev.get("mbs", 0))
        w.tokens += int(ev.get("tokens", 0) or 0)
        w.flops += float(ev.get("flops", 0.0) or 0.0)
        if ev.get("loss") is not None:
            w.loss = float(ev["loss"])
        group = self.groups.get(w.spec.task_id)
        if group is None:
            return
        verdict = group.stragglers.observe(w.rank, compute, phase)
        if verdict is not None:
            if w.state == WorkerState.HEALTHY:
                w.state = WorkerState.UNHEALTHY
            self._report(
                w,
                StragglerVerdict(
                    iteration=it,
                    compute_s=verdict.rank_median_s,
                    peer_median_s=verdict.peer_median_s,
                    ratio=verdict.ratio,
                ),
                "statistical_monitoring",
            )

    def _ev_mb(self, w: Worker, ev: dict[str, Any]) -> None:
        pass  # counted at iteration end; the event keeps the micro-batch's global identity flowing

    def _ev_sync(self, w: Worker, ev: dict[str, Any]) -> None:
        if ev.get("it") is not None:
            w.synced_it = int(ev["it"])

    def _ev_await(self, w: Worker, ev: dict[str, Any]) -> None:
        """The worker's collective failed; it waits for a transition order, not in an iteration."""
        w.iter_start = None
        w.slow_phase = None
        w.phase = "await"

    def _ev_transition(self, w: Worker, ev: dict[str, Any]) -> None:
        report = TransitionReport.model_validate(ev["report"])
        self._report(w, report, None, float(ev["t"]), epoch=ev.get("ep"))

    def _ev_phase(self, w: Worker, ev: dict[str, Any]) -> None:
        if ev.get("state") == "begin":
            w.slow_phase = str(ev["phase"])
            w.slow_since = float(ev["t"])
        else:
            w.slow_phase = None

    def _ev_exception(self, w: Worker, ev: dict[str, Any]) -> None:
        stale = self._stale(w, ev)
        if not stale:
            w.exception_reported = True
        self._report(
            w,
            WorkerException(
                exc_type=str(ev["type"]),
                message=str(ev["msg"]),
                traceback=str(ev["tb"]),
                iteration=ev.get("it"),
                in_collective=bool(ev.get("in_collective", False)),
                waiting=bool(ev.get("waiting", False)),
            ),
            "exception_propagation",
            float(ev["t"]),
            epoch=int(ev["ep"]) if stale else None,
            rank=w.old_rank if stale else None,
        )

    def _ev_done(self, w: Worker, ev: dict[str, Any]) -> None:
        w.finished = True

    _EVENT_HANDLERS: dict[str, Callable[[Supervisor, Worker, dict[str, Any]], None]] = {
        "iter_start": _ev_iter_start,
        "iter_end": _ev_iter_end,
        "mb": _ev_mb,
        "phase": _ev_phase,
        "exception": _ev_exception,
        "done": _ev_done,
        "sync": _ev_sync,
        "await": _ev_await,
        "transition": _ev_transition,
    }

    # ------------------------------------------------------------------ statistical monitoring
    async def _monitor_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.poll_s)
            now = time.time()
            for group in list(self.groups.values()):
                for w in group.workers.values():
                    if not w.state.is_running or w.exit is not None:
                        continue
                    self._check_hang(w, now)
            if now - self._last_flush >= STATS_INTERVAL_S:
                self._last_flush = now
                for group in self.groups.values():
                    for w in group.workers.values():
                        self._flush_stats(w)

    def _check_hang(self, w: Worker, now: float) -> None:
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
        if self.elastic_wait_s > 0 and w.synced_it == it and w.slow_phase is None:
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
        self._report(
            w,
            HangVerdict(
                iteration=it,
                elapsed_s=elapsed,
                threshold_s=threshold,
                median_iteration_s=median,
                phase=phase if phase in ("train", "first", "checkpoint", "evaluation") else "train",
                stack=stack,
            ),
            "statistical_monitoring",
            (w.iter_start or time.time()) + threshold,
        )
        if self.kill_hung:
            w.signal(signal.SIGKILL)

    def _flush_stats(self, w: Worker) -> None:
        if not w.durations or w.first_it is None or w.last_it is None:
            return
        self._report(
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
            ),
            None,
        )
        w.durations, w.computes, w.first_it, w.mbs, w.tokens, w.flops = [], [], None, 0, 0, 0.0

    # ------------------------------------------------------------------ commands
    async def stop_group(self, task_id: str, ranks: list[int] | None = None, grace_s: float = 5.0) -> None:
        group = self.groups.get(task_id)
        if group is None:
            return
        targets = [w for r, w in group.workers.items() if ranks is None or r in ranks]
        for w in targets:
            if w.exit is None:
                w.expected_exit = True
                w.signal(signal.SIGTERM)
        waits = [w.exited.wait() for w in targets if w.exit is None]
        if waits:
            try:
                await asyncio.wait_for(asyncio.gather(*waits), timeout=max(grace_s, 0.01))
            except TimeoutError:
                for w in targets:
                    if w.exit is None:
                        w.signal(signal.SIGKILL)
                await asyncio.wait_for(
                    asyncio.gather(*[w.exited.wait() for w in targets if w.exit is None]), timeout=10
                )
        if all(w.exit is not None for w in group.workers.values()):
            self.groups.pop(task_id, None)

    async def reconfigure_group(
        self, spec: WorkerSpec, survivors: dict[int, int], transition: TransitionSpec
    ) -> tuple[list[int], list[int]]:
        """Move the task's local workers to ``spec``'s epoch; returns (ranks kept in place, fresh ranks).

        ``survivors`` maps old ranks to new ranks. A local worker is kept in place when it is listed,
        still alive, and its new rank runs on the same device (a process cannot change GPU);
        elastic mode is required (otherwise the worker has left already after its failure). The
        kept workers get a transition order; every other local worker of the task is stopped; new
        ranks without a kept worker start fresh processes (they take their state as the order's
        ``state_sources`` and the ranks' consensus decide, see :mod:`agents.training.worker`).
        """
        task_id = spec.task_id
        group = self.groups.get(task_id)
        devices = {ra.rank: ra.device for ra in spec.launch.ranks}
        keep: dict[int, Worker] = {}
        if group is not None and self.elastic_wait_s > 0:
            for old_rank, w in sorted(group.workers.items()):
                new_rank = survivors.get(old_rank)
                if new_rank is None or new_rank in keep:
                    continue
                if w.exit is None and w.state.is_running and devices.get(new_rank) == w.device:
                    keep[new_rank] = w
        if group is not None:
            kept = {id(w) for w in keep.values()}
            stop = [r for r, w in group.workers.items() if id(w) not in kept]
            if stop:
                await self.stop_group(task_id, stop, grace_s=2.0)
        group = self.groups.get(task_id)
        if group is None:
            group = TaskGroup(spec, self.cfg, workers={})
            self.groups[task_id] = group
        group.spec = spec
        group.stragglers = TaskStragglers(self.cfg)
        group.workers = {}
        for new_rank, w in keep.items():
            self._flush_stats(w)  # the old epoch's statistics go out under the old epoch
            w.old_rank = w.rank
            w.rank, w.spec, w.transition = new_rank, spec, transition
            w.reset_monitoring(self.cfg)
            group.workers[new_rank] = w
            assign = WorkerAssignment(
                task_id=task_id,
                epoch=spec.epoch,
                rank=new_rank,
                device=w.device,
                launch=spec.launch,
                node=self.node,
                transition=transition,
            )
            w.send_order(
                {"transition": {"order": transition.kind, "assignment": assign.model_dump(mode="json")}}
            )
        fresh: list[int] = []
        for ra in spec.launch.ranks:
            if ra.rank in group.workers:
                continue
            w = Worker(spec, ra.rank, ra.device, self.cfg)
            w.transition = transition
            group.workers[ra.rank] = w
            await self._start_worker(w)
            fresh.append(ra.rank)
        if not group.workers:
            self.groups.pop(task_id, None)
        return sorted(keep), fresh

    def inject(self, task_id: str, fault: FaultSpec) -> str:
        """Route a fault to its worker. Returns a description for the ack."""
        group = self.groups.get(task_id)
        if group is None:
            raise LookupError(f"no workers of task {task_id!r} on this node")
        ranks = [fault.rank] if fault.rank is not None else list(group.workers)
        missing = [r for r in ranks if r not in group.workers]
        if missing:
            raise LookupError(f"rank(s) {missing} of task {task_id!r} are not on this node")
        for r in ranks:
            w = group.workers[r]
            if fault.kind == "crash" and fault.at_iteration is None:
                w.signal(signal.SIGKILL)
            else:
                w.send_order({"fault": fault.model_dump()})
        return f"{fault.kind} -> ranks {ranks}"
