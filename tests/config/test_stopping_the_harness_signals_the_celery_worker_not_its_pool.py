"""The harness stops the Celery worker by signalling its main process alone: the worker then stops its pool
itself (a warm shutdown: the task in flight finishes). Signalled as a group, the pool processes got SIGTERM
beside their parent and the task in flight died as ``WorkerLostError`` (three tracebacks at the end of a
chaos run). Other children are still signalled as a group, and nothing of either is left running."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from controlplane.config.system import System
from tests.processes import alive, spawn

# a parent that, on SIGTERM, notes it and exits; its child (same process group, like a pool process) notes
# any SIGTERM it gets and otherwise sleeps until it is killed
FAMILY = """
import os, signal, sys, time
out = sys.argv[1]
def note(who):
    def handler(signum, frame):
        with open(os.path.join(out, who), "w") as f:
            f.write("TERM")
        if who == "leader":
            sys.exit(0)
    return handler
pid = os.fork()
if pid == 0:
    signal.signal(signal.SIGTERM, note("pool"))
    with open(os.path.join(out, "pool.pid"), "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(0.1)
signal.signal(signal.SIGTERM, note("leader"))
while True:
    time.sleep(0.1)
"""


def _family(system: System, name: str, out: Path) -> int:
    out.mkdir()
    system.start(name, [sys.executable, "-c", FAMILY, str(out)])
    deadline = time.monotonic() + 10
    while not (out / "pool.pid").exists():
        assert time.monotonic() < deadline, "the family did not start"
        time.sleep(0.05)
    return int((out / "pool.pid").read_text())


def test_stopping_the_harness_signals_the_celery_worker_not_its_pool(tmp_path: Path) -> None:
    system = System(tmp_path / "run", spawn=spawn, say=lambda line: None)
    system.urls = {"DATABASE_URL": "postgresql://unused", "REDIS_URL": "redis://unused"}  # nothing connects
    worker_pool = _family(system, "worker", tmp_path / "worker")
    agent_child = _family(system, "node-1", tmp_path / "agent")

    system.stop(grace_s=5.0)

    assert (tmp_path / "worker" / "leader").read_text() == "TERM"
    assert not (tmp_path / "worker" / "pool").exists()  # its parent's to stop, not the harness's
    assert (tmp_path / "agent" / "leader").read_text() == "TERM"
    assert (tmp_path / "agent" / "pool").read_text() == "TERM"  # any other child: the whole group
    time.sleep(0.2)
    assert not alive(worker_pool)
    assert not alive(agent_child)
