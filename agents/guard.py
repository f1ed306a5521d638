"""The agent's guard: when the agent is gone, however it went, nothing it started stays.

Every process the agent starts for training (workers, warm spares, the spare zygote) carries
``UNICRON_AGENT_INSTANCE=<id of this agent>`` in its environment, and so does whatever those start in
turn: the environment is inherited across ``fork`` and ``exec``. ``dist_checkpointing``'s
multiprocessing helpers (``multiprocessing.resource_tracker`` and the ``spawn_main`` of a
``Manager``) are such processes. Workers die with the agent (``PR_SET_PDEATHSIG``), but their helpers
do not: ``PDEATHSIG`` is not inherited across ``fork``, and the helpers do not watch their parent. A
worker that dies alone is cleaned up by the agent (it kills the worker's process group when it reaps
it); an agent that is SIGKILLed cleans up nothing.

The guard is a small process the agent starts in a session of its own (so a signal to the agent's
process group does not reach it), with no ``PDEATHSIG``, holding the read end of a pipe whose write end
only the agent holds. When the agent exits — stopped, crashed or SIGKILLed — the kernel closes the
write end, the guard reads EOF, SIGKILLs every process whose environment carries the agent's id (until
none is left), and exits. An agent that stops normally closes the pipe itself after stopping its
workers, and the guard's sweep finds nothing or the stragglers.

The agent also names its snapshot root (``/dev/shm/unicron-snapshots-...``): once the processes are gone
the guard removes the directories in it that hold no file, the root included. Snapshots themselves stay (an
agent restarted with the same run directory finds them again); an agent that held none leaves nothing.

Run by the agent as ``python -m agents.guard ID [DIRECTORY ...]`` (stdlib only: it starts in milliseconds).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

ENV_AGENT_INSTANCE = "UNICRON_AGENT_INSTANCE"
SWEEP_ROUNDS = 50
SWEEP_PAUSE_S = 0.05
"""A sweep repeats until a scan finds no marked process (one may have forked meanwhile), at most this
many rounds this far apart."""


def marked_processes(instance: str) -> list[int]:
    """Pids of the other processes whose environment has ``UNICRON_AGENT_INSTANCE=instance``."""
    needle = f"{ENV_AGENT_INSTANCE}={instance}".encode()
    own = os.getpid()
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == own:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                environ = fh.read()
        except OSError:  # gone, or not ours to read
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry))
    return found


def sweep(instance: str, rounds: int = SWEEP_ROUNDS, pause_s: float = SWEEP_PAUSE_S) -> int:
    """SIGKILL every process marked with ``instance`` until none is left; how many were killed."""
    killed: set[int] = set()
    for _ in range(rounds):
        pids = marked_processes(instance)
        alive = [pid for pid in pids if not _zombie(pid)]
        if not alive:
            break
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        time.sleep(pause_s)
    return len(killed)


def remove_empty_dirs(root: Path) -> None:
    """Remove the directories under ``root`` that hold no file (deepest first), then ``root`` if empty."""
    if not root.is_dir():
        return
    for path, _, _ in sorted(os.walk(root), key=lambda entry: -len(entry[0])):
        with contextlib.suppress(OSError):  # not empty, or gone
            os.rmdir(path)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2 :].split()[:1] == ["Z"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or not args[0]:
        print(
            "usage: python -m agents.guard AGENT_INSTANCE_ID [DIRECTORY ...] (started by the agent)",
            file=sys.stderr,
        )
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # only the agent's end of the pipe ends the guard
    with contextlib.suppress(OSError):
        while os.read(0, 4096):
            pass
    killed = sweep(args[0])
    if killed:
        print(f"agent guard: killed {killed} process(es) left by agent {args[0]}", file=sys.stderr)
    for directory in args[1:]:
        remove_empty_dirs(Path(directory))
    return 0


if __name__ == "__main__":
    sys.exit(main())
