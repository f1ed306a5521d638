"""The local supervisor: starts a task's workers, stops and reconfigures them, supervises their processes.

Three of the four in-band detectors run in the agent (the fourth, node health, runs on the coordinator):

- **process supervision** (here): every worker is a child process; ``await proc.wait()`` wakes the
  agent as soon as it exits, and the exit code / signal is reported (``WorkerExited``);
- **exception propagation** and **online statistical monitoring** (hangs, stragglers) run in the
  :class:`~agents.worker_monitor.WorkerMonitor`, which handles the hook events of every worker, checks
  them for hangs and flushes their statistics; it reads the workers and sends its reports through the
  supervisor (:class:`~agents.worker_monitor.MonitorHost`).

Workers are either real processes (``megatron``) or in-agent simulated workers (``sim``,
:mod:`agents.sim`); the supervisor drives both through one :class:`~agents.worker_handle.WorkerHandle`
and both feed :meth:`Supervisor.on_event` with the same typed hook events
(:mod:`agents.training.hook_protocol`).

Transitions (docs/ARCHITECTURE.md §7.6): :meth:`Supervisor.reconfigure_group` moves a task to a new epoch. A
surviving worker keeps its process: the supervisor re-keys it under its new rank and epoch (its
reports carry them from then on; reports of its old epoch that arrive late keep the old epoch, the
hook tags them), resets its hang/straggler warm-up, and sends it a transition order down the hook
socket. Only ranks without a live local process start fresh; local workers the new epoch does not
list are stopped. In elastic mode (``elastic_wait_s > 0``) a worker whose collective failed reports
the exception and waits for that order instead of exiting.

Warm spares, their zygote, the reaping of orphaned processes and the *warming* state are the
:class:`~agents.spare_pool.SparePool`'s: wherever a worker process would be launched (StartWorkers, a
restarted or added rank in Reconfigure, a dead rank in Retry) a ready spare gets the rank's
assignment and environment over its hook connection instead, and from then on is that rank's worker
(same pid supervision, log file, stack file, session, PDEATHSIG). No ready spare: a fresh process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agents.api import ExitRecord, WorkerSpec, WorkerState
from agents.guard import ENV_AGENT_INSTANCE
from agents.monitor import MonitorConfig, TaskStragglers
from agents.prctl import die_with_parent
from agents.settings import worker_nice
from agents.sim import SimWorker
from agents.spare_pool import Spare, SparePool
from agents.training.assignment import ENV_ELASTIC_WAIT, ENV_WORKER, WorkerAssignment
from agents.training.elastic import TransitionSpec
from agents.training.hook import ENV_RANK, ENV_SOCKET, ENV_STACK_FILE
from agents.training.hook_protocol import (
    AssignOrder,
    DrillAnswer,
    DrillRequest,
    FaultOrder,
    HookEvent,
    HookProtocolError,
    TransitionOrder,
    decode_event,
    encode,
)
from agents.training.snapshot import ENV_SNAPSHOT_DIR
from agents.worker_handle import ProcessHandle, WorkerHandle
from agents.worker_monitor import WorkerMonitor
from agents.workers import TaskGroup, Worker
from controlplane.core.protocol import (
    Detector,
    FaultSpec,
    WorkerEvent,
    WorkerExited,
    WorkerReport,
    WorkerStarted,
    WorkerStatus,
)

log = logging.getLogger("agents.supervisor")

Emit = Callable[[WorkerReport], None]


def _ts(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def _prepare_child() -> None:  # pragma: no cover - runs in the child
    """Worker dies with its agent (a node's agent gone means the node is gone); it runs at the nice value
    of ``UNICRON_WORKER_NICE`` (checked when the agent started)."""
    die_with_parent()
    nice = worker_nice()
    if nice:
        os.nice(nice)


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
        self.run_dir = run_dir or Path(tempfile.mkdtemp(prefix="unicron-agent-"))
        self.socket_path = self.run_dir / "hook.sock"
        if len(str(self.socket_path)) > 100:  # AF_UNIX path limit (108 bytes)
            self.socket_path = Path(tempfile.mkdtemp(prefix="uc-")) / "hook.sock"
        self.worker_env = worker_env or {}
        self.groups: dict[str, TaskGroup] = {}
        self._by_pid: dict[int, tuple[Worker, ProcessHandle]] = {}
        """Worker processes by pid: a hook connection's hello binds to its handle."""
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.drill: Callable[[str | None, FaultSpec], str] | None = None
        """Set by the agent: runs a fault drill (also node_loss) from the local drill CLI."""
        self.spare_pool = SparePool(
            self.run_dir,
            count=spares if worker_kind == "megatron" else 0,
            refill_s=spare_refill_s,
            zygote=zygote,
            base_env=self._worker_base_env,
            prepare_child=_prepare_child,
            spawn=self._spawn,
        )
        self.on_task_completed: Callable[[str], None] | None = None
        """Set by the agent: every local rank of the task finished its training (exit 0, done)."""
        self.worker_monitor = WorkerMonitor(self, self.cfg, kill_hung, elastic_wait_s)
        """Hook events, hangs, stragglers and statistics of the workers (:mod:`agents.worker_monitor`)."""
        self.instance = uuid.uuid4().hex
        """This agent's id in the environment of every process it starts (:mod:`agents.guard`)."""
        self.guard: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self.guard = self._start_guard()  # simulated ranks start no process, but the snapshot root is there
        self._server = await asyncio.start_unix_server(self._serve_hook, path=str(self.socket_path))
        self.worker_monitor.start()
        await self.spare_pool.start(self._worker_pids)

    async def close(self) -> None:
        self.spare_pool.closing = True  # stopped workers must not make the pool start replacements
        for group in list(self.groups.values()):
            await self.stop_group(group.spec.task_id, grace_s=0.0)
        await self.spare_pool.close()
        self.worker_monitor.close()
        for t in list(self._tasks):
            t.cancel()
        if self._server is not None:
            self._server.close()
        await self._stop_guard()

    def _start_guard(self) -> subprocess.Popen[bytes]:
        """The guard that kills whatever this agent started once the agent is gone (:mod:`agents.guard`):
        in a session of its own, with the only write end of its stdin held here."""
        with open(self.run_dir / "guard.log", "ab") as logf:
            snapshots = self.worker_env.get(ENV_SNAPSHOT_DIR)  # its empty directories go too
            return subprocess.Popen(
                [sys.executable, "-m", "agents.guard", self.instance, *([snapshots] if snapshots else [])],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=logf,
                start_new_session=True,
            )

    async def _stop_guard(self) -> None:
        """Close the guard's pipe: it sweeps what is left (the workers are stopped by now) and exits."""
        guard, self.guard = self.guard, None
        if guard is None:
            return
        if guard.stdin is not None:
            guard.stdin.close()
        deadline = time.monotonic() + 10.0
        while guard.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

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
        self.spare_pool.kill_all()

    # ------------------------------------------------------------------ warm spares
    @property
    def warming(self) -> bool:
        """Spares are configured and none has been ready yet (see :attr:`SparePool.warming`)."""
        return self.spare_pool.warming

    @property
    def on_warm(self) -> Callable[[], None] | None:
        """Set by the agent: called once when warming ends (it sends a heartbeat at once)."""
        return self.spare_pool.on_warm

    @on_warm.setter
    def on_warm(self, callback: Callable[[], None] | None) -> None:
        self.spare_pool.on_warm = callback

    @property
    def spares(self) -> dict[int, Spare]:
        """Spare processes not yet handed out (starting or ready), by pid."""
        return self.spare_pool.spares

    def spare_info(self) -> list[dict[str, Any]]:
        return self.spare_pool.info()

    def _worker_pids(self) -> set[int]:
        """Worker processes the supervisor waits for itself."""
        pids = set(self._by_pid)
        pids |= {w.pid for g in self.groups.values() for w in g.workers.values() if w.pid is not None}
        return pids

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
        env[ENV_AGENT_INSTANCE] = self.instance  # whatever the worker starts carries it too
        return env

    # ------------------------------------------------------------------ evidence
    def report(
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
        launch = self._LAUNCHERS.get(w.spec.kind, Supervisor._launch_process)
        handle = await launch(self, w)
        w.attach(handle)
        self.report(w, WorkerStarted(pid=handle.pid if handle.pid is not None else os.getpid()), None)
        self._spawn(self._watch(w, handle))

    async def _launch_sim(self, w: Worker) -> WorkerHandle:
        return SimWorker(self, w)

    async def _launch_process(self, w: Worker) -> WorkerHandle:
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
        stack_file = self.run_dir / f"stack-{spec.task_id}-e{spec.epoch}-r{w.rank}.txt"
        rank_env = {
            ENV_WORKER: assign.model_dump_json(),
            ENV_STACK_FILE: str(stack_file),
            ENV_RANK: str(w.rank),
            ENV_ELASTIC_WAIT: str(self.elastic_wait_s),
            **self.worker_env,
        }
        log_path = self.run_dir / f"worker-{spec.task_id}-e{spec.epoch}-r{w.rank}.log"
        spare = self.spare_pool.take()
        if spare is not None and spare.writer is not None:
            # Register the pid first: the worker's hello on this connection binds it to ``w``.
            handle = ProcessHandle(spare.proc, stack_file)
            self._by_pid[handle.pid] = (w, handle)
            spare.writer.write(encode(AssignOrder(env=rank_env, log=str(log_path))))
            log.info("rank %s of %s epoch %s: warm spare %s", w.rank, spec.task_id, spec.epoch, handle.pid)
            self.spare_pool.replace(spare, w.first_iteration, w.exited)
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
            handle = ProcessHandle(proc, stack_file)
            self._by_pid[handle.pid] = (w, handle)
        return handle

    _LAUNCHERS: dict[str, Callable[[Supervisor, Worker], Awaitable[WorkerHandle]]] = {
        "sim": _launch_sim,
        "megatron": _launch_process,
    }
    """How a rank of each worker kind is launched."""

    # ------------------------------------------------------------------ process supervision
    async def _watch(self, w: Worker, handle: WorkerHandle) -> None:
        code = await handle.wait()
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
        self.worker_monitor.flush_stats(w)
        self.report(
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
        group = self.groups.get(w.spec.task_id)
        if (
            self.on_task_completed is not None
            and group is not None
            and group.result().state == WorkerState.SUCCEEDED
        ):
            self.on_task_completed(w.spec.task_id)

    # ------------------------------------------------------------------ hook link
    async def _serve_hook(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        w: Worker | None = None
        link: ProcessHandle | None = None
        try:
            while line := await reader.readline():
                try:
                    event = decode_event(line)
                except HookProtocolError as exc:
                    log.warning("hook frame refused: %s", exc)
                    continue
                if w is None:
                    if event.ev == "drill":
                        await self._serve_drill(event, writer)
                        return
                    if event.ev == "spare":
                        # A warm spare: the connection stays unbound until its worker says hello.
                        self.spare_pool.on_ready(event, writer)
                        continue
                    if event.ev != "hello":
                        continue
                    bound = self._by_pid.get(event.pid)
                    if bound is None:
                        log.warning("hook hello from unknown pid %s", event.pid)
                        return
                    w, link = bound
                    link.bind(writer)
                    continue
                self.on_event(w, event)
        except (ConnectionError, ValueError) as exc:
            log.warning("hook link error: %s", exc)
        finally:
            if link is not None:
                link.unbind()
            writer.close()

    async def _serve_drill(self, event: DrillRequest, writer: asyncio.StreamWriter) -> None:
        """Local drill CLI (``python -m agents.drill``): inject a fault without the coordinator."""
        try:
            if self.drill is None:
                raise RuntimeError("drills are not enabled")
            result = DrillAnswer(ok=True, detail=self.drill(event.task_id, event.fault))
        except Exception as exc:
            result = DrillAnswer(ok=False, detail=f"{type(exc).__name__}: {exc}")
        writer.write(encode(result))
        await writer.drain()

    def on_event(self, w: Worker, ev: HookEvent) -> None:
        """A decoded hook event of worker ``w`` (from its socket, or from a simulated worker)."""
        self.worker_monitor.on_event(w, ev)

    @property
    def on_hook_delay(self) -> Callable[[float], None] | None:
        """Set by the agent's metrics: seconds from a worker stamping a hook event to its handling."""
        return self.worker_monitor.on_hook_delay

    @on_hook_delay.setter
    def on_hook_delay(self, callback: Callable[[float], None] | None) -> None:
        self.worker_monitor.on_hook_delay = callback

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
        still alive, reached the training loop of its epoch (a rank still in that epoch's rendezvous may
        be blocked on a peer that is gone: it is stopped and started afresh, never kept), and its new rank
        runs on the same device (a process cannot change GPU);
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
                reached_loop = w.loop_epoch == w.spec.epoch
                if (
                    w.exit is None
                    and w.state.is_running
                    and reached_loop
                    and devices.get(new_rank) == w.device
                ):
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
            self.worker_monitor.flush_stats(w)  # the old epoch's statistics go out under the old epoch
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
            w.send_order(TransitionOrder(kind=transition.kind, assignment=assign))
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
                w.send_order(FaultOrder(fault=fault))
        return f"{fault.kind} -> ranks {ranks}"
