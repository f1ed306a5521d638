"""Worker-side fault injection for drills and tests.

The agent pushes a :class:`~controlplane.core.protocol.FaultSpec` (as JSON) down the hook socket;
the worker arms it and fires it at the requested iteration:

- ``crash``: SIGKILL to itself at the start of the iteration (the agent can also SIGKILL directly);
  with ``message="after_all_reduce"`` it fires right after that iteration's gradient all-reduce
  instead (the peers have reduced gradients and finish the step: docs/ARCHITECTURE.md §7.6, failure after the
  sync);
- ``exception``: a ``RuntimeError`` raised in the training code at the start of the iteration;
- ``hang``: the rank stops at the start of the iteration, before its micro-batches (a stuck kernel or
  data loader); its peers finish theirs and block in the real gloo/NCCL gradient all-reduce waiting
  for it, which is what lets the agent tell the culprit from its victims;
- ``network_error``: the next ``all_reduce`` over a group of more than one rank raises
  ``RuntimeError(... Connection reset by peer)``, the same error gloo raises when a link drops; the
  peers then see the link close for real;
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
from agents.training.hook_protocol import FaultOrder
from controlplane.core.protocol import FaultSpec

AFTER_ALL_REDUCE = "after_all_reduce"
"""``FaultSpec.message`` of a crash that fires after the gradient all-reduce."""


class InjectedFault(RuntimeError):
    """Raised by an ``exception`` fault: a deliberate error in training code."""


class WorkerFaults:
    """Armed faults of one worker and the shim that lets them fire inside a collective."""

    def __init__(self, hook: TrainingHook) -> None:
        self.hook = hook
        self.pending: list[FaultSpec] = []
        self.slowdown = 1.0
        self._collective_fault: str | None = None
        self._message = ""
        self._iteration = -1
        self._crash_after_sync: int | None = None
        hook.fault_handlers.append(self.arm)
        self._install_shim()

    def arm(self, order: FaultOrder) -> None:
        self.pending.append(order.fault)

    def on_iteration_start(self, it: int) -> None:
        """Fire the faults due at iteration ``it`` (call it inside the hook's iteration context)."""
        self._iteration = it
        due = [f for f in self.pending if f.at_iteration is None or f.at_iteration <= it]
        for fault in due:
            self.pending.remove(fault)
            kind = fault.kind
            message = fault.message
            if kind == "crash" and message == AFTER_ALL_REDUCE:
                self._crash_after_sync = it
            elif kind == "crash":
                os.kill(os.getpid(), signal.SIGKILL)
            elif kind == "exception":
                raise InjectedFault(f"{message} (at iteration {it})")
            elif kind == "hang":
                threading.Event().wait()  # stuck, forever
            elif kind == "network_error":
                self._collective_fault = kind
                self._message = message
            elif kind == "straggler":
                self.slowdown = fault.slowdown

    def after_all_reduce(self, it: int) -> None:
        """Call right after the gradient all-reduce of iteration ``it``."""
        if self._crash_after_sync == it:
            os.kill(os.getpid(), signal.SIGKILL)

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
            elif kind == "network_error" and _crosses_network(args, kwargs):
                faults._collective_fault = None
                raise RuntimeError(NETWORK_ERROR_MESSAGE)
            result = original(*args, **kwargs)
            faults.hook.in_collective = False
            return result

        dist.all_reduce = all_reduce


def _crosses_network(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """A link can only drop in a collective with peers (not a one-rank TP group's all-reduce)."""
    group = kwargs.get("group", args[2] if len(args) > 2 else None)
    try:
        return bool(dist.get_world_size(group) > 1)
    except (RuntimeError, ValueError):
        return True
