"""Bind a CPU rank to one core of its host (``UNICRON_CPU_BIND``).

On GPUs a rank owns its device: its speed does not depend on which other ranks share the host. A
single machine that emulates several nodes with CPU devices breaks that twice over. Unbound, every
rank shares every core, so a task trains faster while another task is down. Bound per emulated node,
a task slows down when a transition moves one of its ranks to a node whose core already runs more
ranks. Neither happens on the hardware being emulated.

``UNICRON_CPU_BIND=rank`` binds every thread of a worker to one core of the set the process was
allowed at its first binding: ``core = allowed[global rank mod len(allowed)]``. The core follows the
rank, not the node: wherever the planner puts rank r of any task, it runs on the same core. With as
many cores as ranks per task, each core carries one rank of every running task, and a rank that
moves keeps its share. The binding is redone whenever a transition gives the process another rank.

``none`` or unset (the default) leaves affinity alone; any other value is refused at the worker's
start with an error that names the variable.
"""

from __future__ import annotations

import contextlib
import os

ENV_CPU_BIND = "UNICRON_CPU_BIND"
MODES = ("none", "rank")

_allowed: tuple[int, ...] | None = None
"""The cores this process could use before its first binding (a rebinding chooses among them)."""


def bind_mode() -> str:
    """The configured mode; ``ValueError`` naming the variable for anything but :data:`MODES`."""
    mode = os.environ.get(ENV_CPU_BIND, "").strip().lower() or "none"
    if mode not in MODES:
        raise ValueError(f"{ENV_CPU_BIND}={mode!r} is not one of {', '.join(MODES)}")
    return mode


def core_for_rank(rank: int, allowed: tuple[int, ...]) -> int:
    """The core of global rank ``rank`` among ``allowed`` (sorted)."""
    if rank < 0:
        raise ValueError(f"rank must be >= 0, got {rank}")
    if not allowed:
        raise ValueError("no cores to bind to")
    return allowed[rank % len(allowed)]


def bind_rank(rank: int) -> int | None:
    """Bind every thread of this process to the core of ``rank``; the core, or None when unbound."""
    global _allowed
    if bind_mode() == "none":
        return None
    if _allowed is None:
        _allowed = tuple(sorted(os.sched_getaffinity(0)))
    core = core_for_rank(rank, _allowed)
    # sched_setaffinity(0) binds the calling thread only: gloo's and torch's threads already running
    # are bound one by one (threads started later inherit the binding of the thread that starts them).
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):
            os.sched_setaffinity(int(tid), {core})
    return core
