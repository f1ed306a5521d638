"""Simulated-compute workers (``--worker sim``): no torch, no process, same reports.

A sim worker is a coroutine inside the agent. Its iteration time comes from the planning
throughput model (:func:`controlplane.core.planning.throughput.iteration_time` for the task's
model, parallel config and device kind), with a little multiplicative jitter. It produces exactly
the hook events a real worker produces (iteration start/end, micro-batches, tokens, FLOPs, slow
first iteration), so one machine can host hundreds of agents for control-plane scale tests.

Faults behave like the real ones from the agent's point of view: ``crash`` ends the worker with
SIGKILL's code, ``exception`` reports an exception and exits with
:data:`~agents.training.hook.EXIT_EXCEPTION`, ``network_error`` does too unless the agent is in
elastic mode (then the worker waits for a transition order, as a real one does), ``hang`` stops
progress inside an iteration, ``straggler`` stretches the compute part.

Transitions follow the real protocol (:mod:`agents.training.worker`): a transition order moves a
live sim worker in place (it keeps its iteration), fresh ranks started by a transition take their
iteration from their state source, and each sends a ``TransitionReport`` after its first iteration
in the new epoch. Phase times are modelled: state bytes (parameters + Adam moments, fp32, per
shard) over the source's bandwidth (:data:`SOURCE_BANDWIDTH`).
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
import traceback
from pathlib import Path
from typing import Any, Protocol

from agents.api import WorkerSpec
from agents.training.assignment import gpt_spec
from agents.training.elastic import TransitionSpec
from agents.training.hook import EXIT_EXCEPTION, NETWORK_ERROR_MESSAGE
from agents.training.hook_protocol import (
    AwaitingOrder,
    CheckpointDone,
    ComputeDone,
    ExceptionRaised,
    HookEvent,
    HookOrder,
    IterationEnd,
    IterationStart,
    MicroBatchDone,
    TrainingDone,
    TransitionDone,
    TransitionOrder,
)
from controlplane.core.planning.devices import get_device_kind
from controlplane.core.planning.throughput import MegatronConfig, iteration_time
from controlplane.core.protocol import FaultSpec, TransitionReport
from controlplane.core.transitions.checkpoints import checkpoint_dir

SIM_DEVICE_KIND = "a100-80g"
FIRST_ITERATION_FACTOR = 3.0
JITTER = 0.02
REBUILD_GROUPS_S = 0.05
"""Modelled teardown + rendezvous of the process groups of a live worker."""
SOURCE_BANDWIDTH: dict[str, float] = {
    "local_device": float("inf"),
    "same_node": 25e9,  # device-to-device on one node (NVLink/PCIe), bytes/s
    "peer_replica": 12.5e9,  # 100 Gb/s between nodes
    "memory_snapshot": 5e9,  # host memory (maybe a peer's) to device
    "checkpoint": 2e9,  # shared file system
    "none": float("inf"),
}
MAX_MIGRATE_S = 5.0
STORED_SOURCES = ("memory_snapshot", "checkpoint")
"""Sources that hold a saved iteration: the rank resumes after it."""


class Worker(Protocol):
    """What a simulated rank reads of the supervisor's worker record."""

    spec: WorkerSpec
    rank: int
    transition: TransitionSpec | None


class Supervisor(Protocol):
    """What a simulated rank needs of its supervisor: where its hook events go, and the elastic wait."""

    elastic_wait_s: float

    def on_event(self, w: Any, ev: HookEvent) -> None: ...


def state_bytes(w: Worker) -> int:
    """Parameters + Adam moments in fp32 (12 bytes per parameter) of this rank's shard."""
    m, p = w.spec.launch.model, w.spec.launch.parallel
    params = 12 * m.layers * m.hidden * m.hidden + m.vocab * m.hidden
    return int(12 * params / (p.tp * p.pp))


def modelled_iteration_s(w: Worker, device_kind: str = SIM_DEVICE_KIND) -> float:
    launch = w.spec.launch
    m, p = launch.model, launch.parallel
    spec = gpt_spec(m)
    per_replica = m.global_batch // (p.dp * m.micro_batch)
    cfg = MegatronConfig(p.tp, p.pp, p.dp, m.micro_batch, max(per_replica, 1), recompute=False)
    return iteration_time(spec, get_device_kind(device_kind), cfg)


class _Killed(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


class SimWorker:
    """A simulated rank: a :class:`~agents.worker_handle.WorkerHandle` whose "process" is a coroutine."""

    def __init__(self, sup: Supervisor, w: Worker, device_kind: str = SIM_DEVICE_KIND) -> None:
        self.sup, self.w = sup, w
        self.iteration_s = modelled_iteration_s(w, device_kind)
        self.pending: list[FaultSpec] = []
        self.orders: list[TransitionOrder] = []
        self._order_arrived = asyncio.Event()
        self.next_it = 0
        self.slowdown = 1.0
        self.where = "init"
        self._killed: asyncio.Future[int] = asyncio.get_event_loop().create_future()
        self._rng = random.Random(w.rank * 7919 + w.spec.epoch)

    # ---- agent side (a :class:`~agents.worker_handle.WorkerHandle`)
    @property
    def pid(self) -> int | None:
        return None  # runs inside the agent

    def send(self, order: HookOrder) -> None:
        if order.order == "fault":
            self.pending.append(order.fault)
        elif order.order == "transition":
            self.orders.append(order)
            self._order_arrived.set()

    def signal(self, sig: int) -> None:
        if not self._killed.done():
            self._killed.set_result(-int(sig))

    async def capture_stack(self, wait_s: float = 0.3) -> str:
        return (
            f'Simulated worker rank {self.w.rank} (most recent call first):\n  File "sim", in {self.where}\n'
        )

    # ---- the "process"
    def _ev(self, ev: HookEvent) -> None:
        self.sup.on_event(self.w, ev)

    async def _sleep(self, seconds: float) -> None:
        done, _ = await asyncio.wait({self._killed}, timeout=seconds)
        if done:
            raise _Killed(self._killed.result())

    async def wait(self) -> int:
        """Run the simulated rank to its exit: its exit code (negative: the signal that killed it)."""
        try:
            return await self._train()
        except _Killed as k:
            return k.code

    def _raise_exception(self, kind: str, message: str, it: int, waiting: bool = False) -> int:
        try:
            if kind == "network_error":
                raise RuntimeError(NETWORK_ERROR_MESSAGE)
            raise RuntimeError(f"{message} (at iteration {it})")
        except RuntimeError as exc:
            self._ev(
                ExceptionRaised(
                    t=time.time(),
                    type="RuntimeError",
                    msg=str(exc),
                    tb="".join(traceback.format_exception(exc)),
                    it=it,
                    in_collective=kind == "network_error",
                    waiting=waiting,
                )
            )
        return EXIT_EXCEPTION

    async def _wait_order(self) -> TransitionOrder | None:
        if not self.orders:
            self._order_arrived.clear()
            waiter = asyncio.ensure_future(self._order_arrived.wait())
            futures: set[asyncio.Future[Any]] = {waiter, self._killed}
            await asyncio.wait(futures, timeout=self.sup.elastic_wait_s, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if self._killed.done():
                raise _Killed(self._killed.result())
        return self.orders.pop(0) if self.orders else None

    async def _enter(self, survivor: bool) -> dict[str, Any]:
        """Model a transition into the worker's (already re-keyed) epoch; returns the report draft."""
        w = self.w
        self.iteration_s = modelled_iteration_s(w)
        source, moved, migrate = "local_device", 0, 0.0
        src = next((s for s in w.spec.launch.state_sources if s.rank == w.rank), None)
        tspec = w.transition
        if not survivor:
            source = src.kind if src is not None else "none"
            if source == "local_device":  # a fresh process holds nothing: the nearest live copy
                source = "same_node"
            moved = state_bytes(w) if source != "none" else 0
            migrate = min(moved / SOURCE_BANDWIDTH[source], MAX_MIGRATE_S)
            if src is not None and src.iteration is not None:
                self.next_it = src.iteration + (1 if source in STORED_SOURCES else 0)
            elif tspec is not None and tspec.resume_iteration is not None:
                self.next_it = tspec.resume_iteration
        self.where = "rendezvous"
        await self._sleep(REBUILD_GROUPS_S + migrate)
        return {
            "from_epoch": tspec.from_epoch if (tspec is not None and survivor) else None,
            "in_place": survivor,
            "source": source,
            "source_node": src.source_node if (src is not None and not survivor) else None,
            "source_rank": src.source_rank if (src is not None and not survivor) else None,
            "bytes_moved": moved,
            "phases_s": {"teardown": 0.0, "rendezvous": REBUILD_GROUPS_S, "migrate": migrate},
        }

    async def _train(self) -> int:
        report: dict[str, Any] | None = None
        if self.w.transition is not None:
            report = await self._enter(survivor=False)
        else:
            # a launch resumes from the stored copy it names, as a real worker loads its checkpoint
            src = next((s for s in self.w.spec.launch.state_sources if s.rank == self.w.rank), None)
            if src is not None and src.kind in STORED_SOURCES and src.iteration is not None:
                self.next_it = src.iteration + 1
            self.where = "setup"
            await self._sleep(0.05)
        epoch_start = self.next_it
        while True:
            code, order = await self._epoch(epoch_start, report)
            if order is None:
                return code
            report = await self._enter(survivor=True)
            epoch_start = self.next_it

    async def _epoch(
        self, epoch_start: int, report: dict[str, Any] | None
    ) -> tuple[int, TransitionOrder | None]:
        """Iterations of one epoch; returns (exit code, None) at the end, or (0, order) to move on."""
        launch = self.w.spec.launch
        m = launch.model
        flops = gpt_spec(m).flops_per_iteration()
        per_rank_flops = flops / launch.world_size
        tokens = m.global_batch * m.seq_len // launch.world_size
        mbs = max(m.global_batch // (launch.parallel.dp * m.micro_batch), 1)
        it = self.next_it
        # the epoch this loop runs in: an order may re-key ``self.w`` while an iteration is in flight, and
        # that iteration's events belong to the epoch it started in (the real hook tags them the same way)
        ep = self.w.spec.epoch
        while it < launch.iterations:
            if self.orders:
                return 0, self.orders.pop(0)
            phase = "first" if it in (0, epoch_start) else "train"
            start = time.time()
            self._ev(IterationStart(it=it, t=start, phase=phase, ep=ep))
            for fault in [f for f in self.pending if f.at_iteration is None or f.at_iteration <= it]:
                self.pending.remove(fault)
                kind = fault.kind
                if kind == "crash":
                    return -signal.SIGKILL, None
                if kind == "network_error" and self.sup.elastic_wait_s > 0:
                    self._raise_exception(kind, fault.message, it, waiting=True)
                    self._ev(AwaitingOrder(t=time.time(), ep=self.w.spec.epoch))
                    order = await self._wait_order()
                    if order is None:
                        return EXIT_EXCEPTION, None
                    return 0, order
                if kind in ("exception", "network_error"):
                    return self._raise_exception(kind, fault.message, it), None
                if kind == "hang":
                    self.where = "all_reduce (hung)"
                    await self._sleep(1e9)
                if kind == "straggler":
                    self.slowdown = fault.slowdown
            base = self.iteration_s * (FIRST_ITERATION_FACTOR if phase == "first" else 1.0)
            base *= 1.0 + self._rng.uniform(-JITTER, JITTER)
            compute = 0.8 * base * self.slowdown
            self.where = "forward_backward"
            for k in range(mbs):
                await self._sleep(compute / mbs)
                self._ev(MicroBatchDone(it=it, idx=k, t=time.time()))
            self._ev(ComputeDone(it=it, t=time.time()))
            self.where = "all_reduce"
            await self._sleep(0.2 * base)
            end = time.time()
            self._ev(
                IterationEnd(
                    it=it,
                    t=end,
                    dur=end - start,
                    compute=compute,
                    mbs=mbs,
                    phase=phase,
                    ep=ep,
                    tokens=tokens,
                    flops=per_rank_flops,
                    loss=None,
                )
            )
            interval = launch.checkpoint_interval
            if interval and (it + 1) % interval == 0 and self.w.rank == 0:
                # a modelled save (no files): reported as the real rank 0 reports its marked checkpoint
                root = Path(launch.checkpoint_dir or "checkpoints")
                self._ev(
                    CheckpointDone(
                        t=end,
                        ep=ep,
                        it=it,
                        path=str(checkpoint_dir(root, it)),
                        size_bytes=state_bytes(self.w),
                    )
                )
            if report is not None:
                phases = dict(report["phases_s"])
                phases.update({"recompute": 0.0, "first_iteration": end - start})
                self._ev(
                    TransitionDone(
                        t=end,
                        ep=ep,
                        report=TransitionReport.model_validate(
                            {**report, "phases_s": phases, "iteration": it}
                        ),
                    )
                )
                report = None
            it += 1
            self.next_it = it
        self._ev(TrainingDone(t=time.time()))
        return 0, None
