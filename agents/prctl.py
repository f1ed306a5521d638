"""The two Linux process controls the agent relies on (``prctl(2)``, through libc).

- ``PR_SET_PDEATHSIG``: a worker, spare or zygote is killed when its parent (the agent's main thread)
  dies; a node's agent gone means the node is gone.
- ``PR_SET_CHILD_SUBREAPER``: processes orphaned below the agent are re-parented to the agent instead of
  init. The spare zygote (:mod:`agents.training.zygote`) double-forks each spare, so the spare becomes the
  agent's own child: the agent waits for it and reads its exit status exactly as for a process it
  started itself.
"""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return False
    return int(libc.prctl(option, value, 0, 0, 0)) == 0


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Have the kernel send ``sig`` to this process when its parent dies. True if set."""
    return _prctl(PR_SET_PDEATHSIG, int(sig))


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants. True if set (Linux ≥ 3.4)."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def _stat_fields(pid: int) -> list[str]:
    """``/proc/PID/stat`` after the command name (which may hold spaces and parentheses): state first,
    then ppid, pgrp, session, ... ; empty if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return []
    return stat[stat.rfind(")") + 2 :].split()


def session_of(pid: int) -> int | None:
    """The session id of a process (a zombie still has one), or None."""
    fields = _stat_fields(pid)
    try:
        return int(fields[3])
    except (IndexError, ValueError):
        return None


def zombie_children() -> list[int]:
    """Pids of this process's children that have exited and wait to be reaped."""
    found: list[int] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children") as fh:
                pids = [int(p) for p in fh.read().split()]
        except (OSError, ValueError):
            continue
        found += [pid for pid in pids if _stat_fields(pid)[:1] == ["Z"]]
    return found
