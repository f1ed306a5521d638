"""Every process a test starts, stopped whatever way the run ends.

``spawn`` starts a child in a session of its own (so that one ``killpg`` stops it and whatever it
started) that the kernel also kills if the pytest process dies without cleaning up (``PR_SET_PDEATHSIG``),
and records it. ``stop_all`` kills every recorded session; the root ``conftest.py`` calls it when the
session finishes — also after Ctrl-C, and after SIGTERM, which it turns into the same interruption — and
at interpreter exit, before the embedded PostgreSQL and Redis are stopped by their own exit handlers.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

from agents.prctl import die_with_parent

_children: dict[int, subprocess.Popen[bytes]] = {}
_lock = threading.Lock()


def _prepare_child() -> None:
    die_with_parent(signal.SIGKILL)


def spawn(command: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(command, **kwargs)`` in a new session, killed with the test run."""
    kwargs.setdefault("start_new_session", True)
    if "preexec_fn" not in kwargs:
        kwargs["preexec_fn"] = _prepare_child
    process: subprocess.Popen[bytes] = subprocess.Popen(list(command), **kwargs)
    with _lock:
        _children[process.pid] = process
    return process


def alive(pid: int) -> bool:
    """The process exists and has not exited. A zombie counts as gone (and is reaped if it is ours): a test
    process that is a child subreaper (an in-process agent makes it one) becomes the parent of whatever a
    run below it daemonised, such as the embedded servers of an inner run."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return False
    if stat[stat.rfind(")") + 2 :].split()[:1] == ["Z"]:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        return False
    return True


def stop_all(grace_s: float = 3.0) -> int:
    """SIGTERM every recorded session, SIGKILL what is left after ``grace_s``; returns how many were
    still running."""
    with _lock:
        running = [p for p in _children.values() if p.poll() is None]
        _children.clear()
    for process in running:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for process in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(max(0.0, deadline - time.monotonic()))
    for process in running:
        # the session may outlive its leader (a daemonised grandchild): kill the group regardless
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(5)
    return len(running)


def interrupt_on_sigterm() -> None:
    """Make SIGTERM end the run the way Ctrl-C does: pytest then tears down every fixture."""

    def _interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, _interrupt)


# Registered at import, i.e. after the embedded servers' handlers when settings were imported first:
# exit handlers run last-registered first, so the children go before the servers they use.
atexit.register(stop_all)
