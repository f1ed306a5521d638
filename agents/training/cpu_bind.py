"""Bind a CPU worker to one core of its host by its task (``UNICRON_CPU_BIND``).

On GPUs a rank owns its device: its speed does not depend on where the other ranks run. A single
machine that emulates several nodes with CPU devices breaks that. Unbound, every rank shares every
core, so a task trains faster while another task is down (which flatters whoever keeps tasks down
longer). Bound per emulated node, a task slows down when a transition moves one of its ranks to a node
whose core already runs more ranks. Bound per rank (rank r on core r mod n), the two ranks of a task
sit on different cores, each next to another task's rank, so every collective step of one task waits
for time slices that the other task holds (in one bench/recovery run its T_ff was 0.367 s against
0.337 s bound by task, on a host whose speed drifted more than that between runs: the case is the
coupling, not that figure).

``UNICRON_CPU_BIND=task`` binds every thread of a worker to the core of its *task*:
``core = allowed[task mod len(allowed)]`` (a numeric task id as is, any other by its CRC-32), among
the cores the process was allowed at its first binding. Wherever the planner puts a task's ranks they
share the same core, so a move changes nobody's speed, and a task does not get faster while another is
down. The binding is redone whenever a transition hands the process another task.

``none`` or unset (the default) leaves affinity alone; any other value is refused with an error that
names the variable (the agent checks it at start, before any worker runs).
"""

from __future__ import annotations

import contextlib
import os
import zlib

from agents.settings import cpu_bind_mode

_allowed: tuple[int, ...] | None = None
"""The cores this process could use before its first binding (a rebinding chooses among them)."""


def core_for_task(task_id: str, allowed: tuple[int, ...]) -> int:
    """The core of ``task_id`` among ``allowed`` (sorted)."""
    if not allowed:
        raise ValueError("no cores to bind to")
    key = int(task_id) if task_id.isdigit() else zlib.crc32(task_id.encode())
    return allowed[key % len(allowed)]


def bind_task(task_id: str) -> int | None:
    """Bind every thread of this process to the core of ``task_id``; the core, or None when unbound."""
    global _allowed
    if cpu_bind_mode() == "none":
        return None
    if _allowed is None:
        _allowed = tuple(sorted(os.sched_getaffinity(0)))
    core = core_for_task(task_id, _allowed)
    # sched_setaffinity(0) binds the calling thread only: gloo's and torch's threads already running
    # are bound one by one (threads started later inherit the binding of the thread that starts them).
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):
            os.sched_setaffinity(int(tid), {core})
    return core
