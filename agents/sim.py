"""Simulated-compute workers (``--worker sim``): no torch, no process, same reports.

A sim worker is a coroutine inside the agent. Its iteration time comes from the planning
throughput model (:func:`controlplane.core.planning.throughput.iteration_time` for the task's
model, parallel config and device kind), with a little multiplicative jitter. It produces exactly
the hook events a real worker produces (iteration start/end, micro-batches, tokens, FLOPs, slow
first iteration), so one machine can host hundreds of agents for control-plane scale tests.

Faults behave like the real ones from the agent's point of view: ``crash`` ends the worker with
SIGKILL's code, ``exception`` and ``network_error`` report an exception and exit with
:data:`~agents.training.hook.EXIT_EXCEPTION`, ``hang`` stops progress inside an iteration,
``straggler`` stretches the compute part.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
import traceback
from typing import TYPE_CHECKING, Any

from agents.training.hook import EXIT_EXCEPTION, NETWORK_ERROR_MESSAGE
from agents.training.worker import model_flops_per_iteration
from controlplane.core.planning.devices import get_device_kind
from controlplane.core.planning.spec import GPTSpec
from controlplane.core.planning.throughput import ParallelConfig, iteration_time

if TYPE_CHECKING:
    from agents.supervisor import Supervisor, Worker

SIM_DEVICE_KIND = "a100-80g"
FIRST_ITERATION_FACTOR = 3.0
JITTER = 0.02


def modelled_iteration_s(w: Worker, device_kind: str = SIM_DEVICE_KIND) -> float:
    launch = w.spec.launch
    m, p = launch.model, launch.parallel
    spec = GPTSpec(m.layers, m.hidden, m.heads, m.seq_len, m.vocab, m.global_batch, m.micro_batch)
    per_replica = m.global_batch // (p.dp * m.micro_batch)
    cfg = ParallelConfig(p.tp, p.pp, p.dp, m.micro_batch, max(per_replica, 1), recompute=False)
    return iteration_time(spec, get_device_kind(device_kind), cfg)


class _Killed(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


class SimWorker:
    def __init__(self, sup: Supervisor, w: Worker, device_kind: str = SIM_DEVICE_KIND) -> None:
        self.sup, self.w = sup, w
        self.iteration_s = modelled_iteration_s(w, device_kind)
        self.pending: list[dict[str, Any]] = []
        self.slowdown = 1.0
        self.where = "init"
        self._killed: asyncio.Future[int] = asyncio.get_event_loop().create_future()
        self._rng = random.Random(w.rank * 7919 + w.spec.epoch)

    # ---- agent side
    def order(self, order: dict[str, Any]) -> None:
        fault = order.get("fault")
        if isinstance(fault, dict):
            self.pending.append(fault)

    def signal(self, sig: int) -> None:
        if not self._killed.done():
            self._killed.set_result(-int(sig))

    def stack(self) -> str:
        return (
            f'Simulated worker rank {self.w.rank} (most recent call first):\n  File "sim", in {self.where}\n'
        )

    # ---- the "process"
    def _ev(self, ev: dict[str, Any]) -> None:
        self.sup.on_event(self.w, ev)

    async def _sleep(self, seconds: float) -> None:
        done, _ = await asyncio.wait({self._killed}, timeout=seconds)
        if done:
            raise _Killed(self._killed.result())

    async def run(self) -> int:
        try:
            return await self._train()
        except _Killed as k:
            return k.code

    def _raise_exception(self, kind: str, message: str, it: int) -> int:
        try:
            if kind == "network_error":
                raise RuntimeError(NETWORK_ERROR_MESSAGE)
            raise RuntimeError(f"{message} (at iteration {it})")
        except RuntimeError as exc:
            self._ev(
                {
                    "ev": "exception",
                    "t": time.time(),
                    "type": "RuntimeError",
                    "msg": str(exc),
                    "tb": "".join(traceback.format_exception(exc)),
                    "it": it,
                    "in_collective": kind == "network_error",
                }
            )
        return EXIT_EXCEPTION

    async def _train(self) -> int:
        launch = self.w.spec.launch
        m = launch.model
        flops = model_flops_per_iteration(m.layers, m.hidden, m.seq_len, m.vocab, m.global_batch)
        per_rank_flops = flops / launch.world_size
        tokens = m.global_batch * m.seq_len // launch.world_size
        mbs = max(m.global_batch // (launch.parallel.dp * m.micro_batch), 1)
        self.where = "setup"
        await self._sleep(0.05)
        for it in range(launch.iterations):
            phase = "first" if it == 0 else "train"
            start = time.time()
            self._ev({"ev": "iter_start", "it": it, "t": start, "phase": phase})
            for fault in [
                f for f in self.pending if f.get("at_iteration") is None or f["at_iteration"] <= it
            ]:
                self.pending.remove(fault)
                kind = fault["kind"]
                if kind == "crash":
                    return -signal.SIGKILL
                if kind in ("exception", "network_error"):
                    return self._raise_exception(kind, str(fault.get("message", "")), it)
                if kind == "hang":
                    self.where = "all_reduce (hung)"
                    await self._sleep(1e9)
                if kind == "straggler":
                    self.slowdown = float(fault.get("slowdown", 1.0))
            base = self.iteration_s * (FIRST_ITERATION_FACTOR if phase == "first" else 1.0)
            base *= 1.0 + self._rng.uniform(-JITTER, JITTER)
            compute = 0.8 * base * self.slowdown
            self.where = "forward_backward"
            for k in range(mbs):
                await self._sleep(compute / mbs)
                self._ev({"ev": "mb", "it": it, "idx": k, "t": time.time()})
            self.where = "all_reduce"
            await self._sleep(0.2 * base)
            end = time.time()
            self._ev(
                {
                    "ev": "iter_end",
                    "it": it,
                    "t": end,
                    "dur": end - start,
                    "compute": compute,
                    "mbs": mbs,
                    "phase": phase,
                    "tokens": tokens,
                    "flops": per_rank_flops,
                    "loss": None,
                }
            )
        self._ev({"ev": "done", "t": time.time()})
        return 0
