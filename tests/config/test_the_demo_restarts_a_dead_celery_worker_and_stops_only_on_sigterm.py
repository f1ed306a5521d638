"""``make demo`` supervises its services: its Celery worker killed, the console says what died, its exit
code and the restart's number, the worker comes back and the demo keeps serving; only SIGTERM (or Ctrl-C)
stops the demo, and then nothing it started is left running (the embedded servers included)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.processes import alive

ROOT = Path(__file__).resolve().parents[2]
DEMO = [sys.executable, "-m", "controlplane.config.demo", "--agents", "1", "--devices-per-agent", "1"]


def _celery_worker(demo: int) -> psutil.Process:
    return next(p for p in psutil.Process(demo).children() if {"celery", "worker"} <= set(p.cmdline()))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_the_demo_restarts_a_dead_celery_worker_and_stops_only_on_sigterm(tmp_path: Path) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "SECRET_KEY"}}
    env.update(UNICRON_STATE_DIR=str(tmp_path / "state"), PYTHONUNBUFFERED="1")
    demo = subprocess.Popen(
        [*DEMO, "--worker", "sim", "--no-tasks", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(b.decode() for b in demo.stdout or ()), daemon=True)
    reader.start()
    started: set[int] = set()

    def wait_for(text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in lines):
            assert demo.poll() is None, "".join(lines)[-4000:]
            assert time.monotonic() < deadline, f"no {text!r} in {timeout:g} s:\n" + "".join(lines)[-4000:]
            started.update(p.pid for p in psutil.Process(demo.pid).children(recursive=True))
            time.sleep(0.2)

    try:
        wait_for("Ctrl-C stops everything", 240)
        started.update(p.pid for p in psutil.Process(demo.pid).children(recursive=True))
        worker = _celery_worker(demo.pid)

        os.killpg(worker.pid, signal.SIGKILL)

        wait_for("worker died (exit code -9); restart 1 in 1 s", 30)
        wait_for("worker restarted (restart 1)", 30)
        assert demo.poll() is None  # a dead service does not stop the demo
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as response:
            assert response.status == 200
        restarted = _celery_worker(demo.pid)
        assert restarted.pid != worker.pid
        started.update(p.pid for p in psutil.Process(demo.pid).children(recursive=True))
        postmaster = (tmp_path / "state" / "pgdata" / "postmaster.pid").read_text().split()[0]
        started.add(int(postmaster))

        demo.send_signal(signal.SIGTERM)
        assert demo.wait(60) == 0
        reader.join(10)
        assert "stopped." in "".join(lines)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
    deadline = time.monotonic() + 20
    while any(alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in started if alive(pid)], "".join(lines)[-3000:]
