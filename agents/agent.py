"""The node agent: coordinator link + command registry + local supervisor."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents import __version__
from agents.api import WorkerSpec
from agents.client import CoordinatorClient, Outbox
from agents.commands import CommandRegistry
from agents.inventory import discover_devices
from agents.metrics import AgentFigures, AgentMetrics
from agents.monitor import MonitorConfig
from agents.settings import MetricsEndpoint, metrics_endpoint, spare_count, spare_zygote
from agents.snapshots import SnapshotStore, SnapshotTransferError
from agents.supervisor import Supervisor
from agents.training.elastic import TransitionSpec
from controlplane.core.protocol import (
    CoordinatorEnvelope,
    DrainCommand,
    FaultSpec,
    Heartbeat,
    Hello,
    InjectFaultCommand,
    RankMapping,
    ReconfigureCommand,
    RetryCommand,
    StartWorkersCommand,
    StopWorkersCommand,
    WorkerReport,
)

log = logging.getLogger("agents.agent")

EXIT_NODE_LOSS = 137
NODE_LOSS_DELAY_S = 0.2
"""The agent acks a node_loss drill, then dies this long after (so the ack can leave)."""


@dataclass
class AgentConfig:
    coordinator: str
    token: str
    devices: int
    worker_kind: str = "megatron"
    node: str = field(default_factory=socket.gethostname)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    run_dir: Path | None = None
    heartbeat_s: float = 1.0
    worker_env: dict[str, str] = field(default_factory=dict)
    elastic_wait_s: float = 30.0
    """Elastic mode: after a collective error a worker waits this long for the coordinator's
    reconfigure/retry (docs/ARCHITECTURE.md §7.6) before it exits; 0 turns it off (workers exit, transitions
    relaunch every process)."""
    spares: int = field(default_factory=spare_count)
    """Warm spare worker processes (:mod:`agents.training.spare`) kept ready for a restarted or added
    rank (real workers only); 0 turns them off. Default: ``UNICRON_SPARES`` or 1."""
    spare_zygote: bool = field(default_factory=spare_zygote)
    """Fork the spares from a zygote process (:mod:`agents.training.zygote`) that imported torch and
    Megatron-Core once, instead of starting each as a fresh process that imports them itself. Default:
    ``UNICRON_SPARE_ZYGOTE`` or on."""
    metrics: MetricsEndpoint | None = field(default_factory=metrics_endpoint)
    """Where to serve the agent's Prometheus metrics (:mod:`agents.metrics`); None: not served. Default:
    ``UNICRON_AGENT_METRICS_PORT`` (0 or unset: off) on ``UNICRON_AGENT_METRICS_ADDR`` (127.0.0.1)."""


class SnapshotFetchFailed(RuntimeError):
    """A ``memory_snapshot`` source could not be fetched from its peer (refused, unreachable, broken)."""


class Agent:
    def __init__(self, cfg: AgentConfig, snapshots: SnapshotStore | None = None) -> None:
        """``snapshots``: the node's in-memory snapshot store (:mod:`agents.snapshots`), started by the
        caller; listed in Hello/Heartbeat, and a peer's copy is fetched before a transition that
        takes its state from it."""
        self.cfg = cfg
        self.snapshots = snapshots
        self.session = uuid.uuid4().hex
        self.started = time.monotonic()
        self.outbox = Outbox()
        self.draining = False
        self.supervisor = Supervisor(
            emit=self._emit,
            worker_kind=cfg.worker_kind,
            monitor=cfg.monitor,
            run_dir=cfg.run_dir,
            worker_env=cfg.worker_env,
            node=cfg.node,
            elastic_wait_s=cfg.elastic_wait_s,
            spares=cfg.spares,
            zygote=cfg.spare_zygote,
        )
        self.supervisor.drill = self._drill
        self.commands = CommandRegistry()
        self.commands.register("start_workers", self._start_workers)
        self.commands.register("stop_workers", self._stop_workers)
        self.commands.register("reconfigure", self._reconfigure)
        self.commands.register("retry", self._retry)
        self.commands.register("inject_fault", self._inject_fault)
        self.commands.register("drain", self._drain)
        self.client = CoordinatorClient(
            cfg.coordinator,
            cfg.token,
            cfg.node,
            self.session,
            hello=self._hello,
            heartbeat=self._heartbeat,
            on_message=self._on_message,
            outbox=self.outbox,
            heartbeat_s=cfg.heartbeat_s,
        )
        self.supervisor.on_warm = self.client.beat_now  # the coordinator waits for it: say it at once
        self.supervisor.on_task_completed = self._task_completed
        self._tasks: set[asyncio.Task[Any]] = set()
        self.metrics = AgentMetrics(cfg.node) if cfg.metrics is not None else None
        if self.metrics is not None:
            self.supervisor.on_hook_delay = self.metrics.observe_hook_delay
            self.client.on_heartbeat = self.metrics.observe_heartbeat

    # ------------------------------------------------------------------ link
    def _emit(self, report: WorkerReport) -> None:
        self.outbox.put(report)

    def _hello(self) -> Hello:
        return Hello(
            agent_version=__version__,
            hostname=socket.gethostname(),
            worker_kind=self.cfg.worker_kind,
            devices=discover_devices(self.cfg.devices, probe_cuda=self.cfg.worker_kind == "megatron"),
            workers=self.supervisor.statuses(),
            task_epochs=dict(self.commands.epochs),
            snapshot_endpoint=self.snapshots.endpoint if self.snapshots is not None else None,
            snapshots=self.snapshots.infos() if self.snapshots is not None else [],
            warming=self.supervisor.warming,
        )

    def _heartbeat(self) -> Heartbeat:
        return Heartbeat(
            uptime_s=time.monotonic() - self.started,
            workers=self.supervisor.statuses(),
            pending_reports=len(self.outbox),
            snapshots=self.snapshots.infos() if self.snapshots is not None else [],
            warming=self.supervisor.warming,
        )

    async def _on_message(self, env: CoordinatorEnvelope) -> None:
        if env.message.type == "snapshot_grant":  # a key, not a command: nothing to ack
            if self.snapshots is not None:
                self.snapshots.set_secret(env.message.task_id, env.message.secret)
            return
        # Commands run concurrently: a StopWorkers with a grace period must not block a later drill.
        task = asyncio.ensure_future(self._handle(env.message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, cmd: Any) -> None:
        ack = await self.commands.dispatch(cmd)
        self.outbox.put(ack)

    def figures(self) -> AgentFigures:
        """The agent's state for its metrics (read in the event loop)."""
        snapshots = self.snapshots.infos() if self.snapshots is not None else []
        workers = [w for g in self.supervisor.groups.values() for w in g.workers.values()]
        spares = list(self.supervisor.spares.values())
        return AgentFigures(
            spares_ready=sum(1 for sp in spares if sp.ready),
            spares=len(spares),
            workers_running=sum(1 for w in workers if w.exit is None and w.handle is not None),
            workers=frozenset(
                (w.spec.task_id, str(w.spec.epoch), str(w.rank), str(w.device), w.state.value)
                for w in workers
                if w.exit is None and w.handle is not None
            ),
            snapshots=len(snapshots),
            snapshot_bytes=sum(s.nbytes for s in snapshots),
            outbox_messages=len(self.outbox),
            link_connected=self.client.connected.is_set(),
        )

    async def run(self) -> None:
        sampler: asyncio.Task[None] | None = None
        if self.metrics is not None and self.cfg.metrics is not None:
            self.metrics.serve(self.cfg.metrics)
            log.info("metrics on http://%s:%d/metrics", self.cfg.metrics.host, self.cfg.metrics.port)
            sampler = asyncio.ensure_future(self.metrics.sample_every(self.figures))
        await self.supervisor.start()
        try:
            await self.client.run()
        finally:
            await self.supervisor.close()
            if sampler is not None:
                sampler.cancel()
            if self.metrics is not None:
                self.metrics.close()

    # ------------------------------------------------------------------ handlers
    def _spec(self, task_id: str, epoch: int, launch: Any) -> WorkerSpec:
        return WorkerSpec(task_id=task_id, epoch=epoch, launch=launch, kind=self.cfg.worker_kind)

    async def _start_workers(self, cmd: StartWorkersCommand) -> str:
        if self.draining:
            raise ValueError("node is draining: no new workers")
        free = {
            d.index for d in discover_devices(self.cfg.devices, probe_cuda=self.cfg.worker_kind == "megatron")
        }
        bad = [ra.device for ra in cmd.launch.ranks if ra.device not in free]
        if bad:
            raise ValueError(f"device(s) {bad} do not exist on this node (has {sorted(free)})")
        self._take_secret(cmd)
        group = await self.supervisor.start_group(self._spec(cmd.task_id, cmd.epoch, cmd.launch))
        return f"started ranks {sorted(group.workers)} of {cmd.task_id} epoch {cmd.epoch}"

    async def _stop_workers(self, cmd: StopWorkersCommand) -> str:
        await self.supervisor.stop_group(cmd.task_id, cmd.ranks, cmd.grace_s)
        if cmd.task_ended:  # cancelled or failed: no transition will take its state from them
            self._task_completed(cmd.task_id)
            return f"stopped {cmd.task_id} ranks {cmd.ranks or 'all'}; its snapshots dropped"
        return f"stopped {cmd.task_id} ranks {cmd.ranks or 'all'}"

    async def _reconfigure(self, cmd: ReconfigureCommand) -> str:
        """In place where possible: surviving local processes rebuild their groups (docs/ARCHITECTURE.md
        §7.6)."""
        tspec = TransitionSpec(
            kind="reconfigure",
            from_epoch=cmd.previous_epoch,
            previous_parallel=cmd.previous_parallel,
            survivors=cmd.survivors,
            resume_iteration=cmd.resume_iteration,
        )
        survivors = {m.old_rank: m.new_rank for m in cmd.survivors}
        group = self.supervisor.groups.get(cmd.task_id)
        if group is not None and cmd.previous_epoch is not None and group.spec.epoch != cmd.previous_epoch:
            survivors = {}  # our workers are not of the epoch the coordinator moves from
        self._take_secret(cmd)
        await self._fetch_snapshots(cmd)
        kept, fresh = await self.supervisor.reconfigure_group(
            self._spec(cmd.task_id, cmd.epoch, cmd.launch), survivors, tspec
        )
        return f"reconfigured {cmd.task_id} epoch {cmd.epoch}: in place {kept}, fresh {fresh}"

    async def _fetch_snapshots(self, cmd: ReconfigureCommand) -> None:
        """A ``memory_snapshot`` source held by a peer agent: copy it into this node's shm first."""
        if self.snapshots is None:
            return
        local = {ra.rank for ra in cmd.launch.ranks}
        wanted: set[tuple[str, int]] = {
            (str(s.endpoint), int(s.iteration or 0))
            for s in cmd.launch.state_sources
            if s.rank in local
            and s.kind == "memory_snapshot"
            and s.endpoint
            and s.iteration is not None
            and s.source_node != self.cfg.node
        }
        for endpoint, iteration in sorted(wanted):
            try:
                await self.snapshots.fetch(endpoint, cmd.task_id, iteration, cmd.epoch)
            except (SnapshotTransferError, OSError, TimeoutError) as e:
                # the step fails; the coordinator blames the copy, not this node (planning.transitions)
                raise SnapshotFetchFailed(f"snapshot fetch from {endpoint} failed: {e}") from e

    def _take_secret(self, cmd: StartWorkersCommand | ReconfigureCommand) -> None:
        """The task's snapshot key travels with its launch (``agents.snapshots`` authentication)."""
        if self.snapshots is not None:
            self.snapshots.undrop_task(cmd.task_id)  # running here (again): its snapshots are kept
            if cmd.snapshot_secret:
                self.snapshots.set_secret(cmd.task_id, cmd.snapshot_secret)

    def _task_completed(self, task_id: str) -> None:
        """The task's training is over here: its snapshots in shm (own and peers' replicas) go."""
        if self.snapshots is not None:
            self.snapshots.drop_task(task_id)

    async def _retry(self, cmd: RetryCommand) -> str:
        """Retry in place (sev3): live ranks rebuild their groups at the new rendezvous and repeat
        the failed step keeping finished micro-batches; dead ranks restart."""
        group = self.supervisor.groups.get(cmd.task_id)
        if group is None:
            raise LookupError(f"no workers of task {cmd.task_id!r} on this node")
        launch = group.spec.launch.model_copy(update={"rendezvous": cmd.rendezvous})
        ranks = sorted(group.workers)
        tspec = TransitionSpec(
            kind="retry",
            from_epoch=group.spec.epoch,
            previous_parallel=launch.parallel,
            survivors=[RankMapping(old_rank=r, new_rank=r) for r in ranks],
            resume_iteration=cmd.iteration,
        )
        kept, fresh = await self.supervisor.reconfigure_group(
            self._spec(cmd.task_id, cmd.epoch, launch), {r: r for r in ranks}, tspec
        )
        port = cmd.rendezvous.master_port
        return f"retried {cmd.task_id} epoch {cmd.epoch} port {port}: in place {kept}, restarted {fresh}"

    async def _inject_fault(self, cmd: InjectFaultCommand) -> str:
        return self._drill(cmd.task_id, cmd.fault)

    def _drill(self, task_id: str | None, fault: FaultSpec) -> str:
        if fault.kind == "node_loss":
            at = time.time() + NODE_LOSS_DELAY_S
            asyncio.get_event_loop().call_later(NODE_LOSS_DELAY_S, self._die)
            return f"node_loss at {at:.6f}"
        if task_id is None:
            raise ValueError("a task_id is needed for this fault")
        return self.supervisor.inject(task_id, fault)

    def _die(self) -> None:
        """Node loss drill: the agent and all its workers die at once, without a goodbye."""
        self.supervisor.kill_everything()
        os.kill(os.getpid(), signal.SIGKILL)

    async def _drain(self, cmd: DrainCommand) -> str:
        self.draining = True
        tasks = [cmd.task_id] if cmd.task_id else list(self.supervisor.groups)
        await asyncio.gather(*(self.supervisor.stop_group(t, None, cmd.grace_s) for t in tasks))
        return f"drained: stopped {tasks}"
