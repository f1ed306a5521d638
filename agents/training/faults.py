"""Worker-side fault injection for drills and tests.

The agent pushes a :class:`~controlplane.core.protocol.FaultSpec` (as JSON) down the hook socket;
the worker arms it and fires it at the requested iteration:

- ``crash``: SIGKILL to itself at the start of the iteration (the agent can also SIGKILL directly);
- ``exception``: a ``RuntimeError`` raised in the training code at the start of the iteration;
- ``hang``: the next ``torch.distributed.all_reduce`` never returns (the rank stops *inside* the
  collective; its peers block in the real gloo/NCCL collective waiting for it);
- ``network_error``: the next ``all_reduce`` raises ``RuntimeError(... Connection reset by peer)``,
  the same error gloo raises when a link drops; the peers then see a real connection reset;
- ``straggler``: every micro-batch's compute time is stretched by ``slowdown``.
``node_loss`` is handled by the agent (it kills its workers and itself).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from agents.training.hook import NETWORK_ERROR_MESSAGE, TrainingHook


class InjectedFault(RuntimeError):
    """Raised by an ``exception`` fault: a deliberate error in training code."""


class WorkerFaults:
    """Armed faults of one worker and the shim that lets them fire inside a collective."""

    def __init__(self, hook: TrainingHook) -> None:
        self.hook = hook
        self.pending: list[dict[str, Any]] = []
        self.slowdown = 1.0
        self._collective_fault: str | None = None
        self._message = ""
        self._iteration = -1
        hook.fault_handlers.append(self.arm)
        self._install_shim()

    def arm(self, order: dict[str, Any]) -> None:
        fault = order.get("fault")
        if isinstance(fault, dict):
            self.pending.append(fault)

    def on_iteration_start(self, it: int) -> None:
        """Fire the faults due at iteration ``it`` (call it inside the hook's iteration context)."""
        self._iteration = it
        due = [f for f in self.pending if f.get("at_iteration") is None or f["at_iteration"] <= it]
        for fault in due:
            self.pending.remove(fault)
            kind = fault["kind"]
            message = str(fault.get("message", "injected fault"))
            if kind == "crash":
                os.kill(os.getpid(), signal.SIGKILL)
            elif kind == "exception":
                raise InjectedFault(f"{message} (at iteration {it})")
            elif kind in ("hang", "network_error"):
                self._collective_fault = kind
                self._message = message
            elif kind == "straggler":
                self.slowdown = float(fault.get("slowdown", 1.0))

    def stretch(self, compute_s: float) -> None:
        """Straggler: spend ``(slowdown - 1) x`` the micro-batch's compute time more."""
        if self.slowdown > 1.0:
            time.sleep(compute_s * (self.slowdown - 1.0))

    def _install_shim(self) -> None:
        original: Callable[..., Any] = dist.all_reduce
        faults = self

        def all_reduce(*args: Any, **kwargs: Any) -> Any:
            # Left True when the collective raises, so the exception report says where it came from.
            faults.hook.in_collective = True
            kind = faults._collective_fault
            if kind == "hang":
                threading.Event().wait()  # stuck in the collective, forever
            elif kind == "network_error":
                faults._collective_fault = None
                raise RuntimeError(NETWORK_ERROR_MESSAGE)
            result = original(*args, **kwargs)
            faults.hook.in_collective = False
            return result

        dist.all_reduce = all_reduce
