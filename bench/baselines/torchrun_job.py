"""Launch and observe the torchrun-style checkpoint-restart baseline (one ``torchrun`` = one node).

:class:`EventSink` serves the hook socket of the baseline's workers: it timestamps what they report
(iteration ends with their model FLOPs, exceptions) and can push fault drills to a rank, exactly as
our agent's hook server would, but it detects and orders nothing. :class:`TorchrunJob` runs
``python -m torch.distributed.run`` (real TorchElastic: its supervision, ``--max-restarts``, its
SIGTERM-then-SIGKILL stop) over :mod:`bench.baselines.torchrun_worker` and timestamps every line of
its log, so the moment the elastic agent noticed a failure can be read back.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlplane.core.protocol import WorkerLaunch

REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "bench" / "baselines" / "torchrun_worker.py"

FAILURE_MARKERS = ("closing signal", "failed (exitcode", "Worker group FAILED", "ChildFailedError")
"""Words torchrun's elastic agent logs when it sees a worker fail (torch 2.13)."""


@dataclass
class Conn:
    """One worker process connected to the sink."""

    opened_at: float
    rank: int = -1
    pid: int = 0
    sock: socket.socket | None = None
    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    closed_at: float | None = None


class EventSink:
    """A Unix-socket server speaking the hook's newline-delimited JSON (one thread per worker)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._srv.bind(str(path))
        self._srv.listen(64)
        self.conns: list[Conn] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._srv.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _accept(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._srv.accept()
            except OSError:
                return
            conn = Conn(opened_at=time.time(), sock=sock)
            with self._lock:
                self.conns.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: Conn) -> None:
        assert conn.sock is not None
        buf = b""
        while True:
            try:
                chunk = conn.sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                conn.closed_at = time.time()
                return
            now = time.time()
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                ev = json.loads(line)
                if ev.get("ev") == "hello":
                    conn.rank, conn.pid = int(ev["rank"]), int(ev["pid"])
                with self._lock:
                    conn.events.append((now, ev))

    # ------------------------------------------------------------------ queries
    def live(self) -> list[Conn]:
        with self._lock:
            return [c for c in self.conns if c.closed_at is None and c.rank >= 0]

    def conn_of(self, rank: int) -> Conn | None:
        found = [c for c in self.live() if c.rank == rank]
        return found[-1] if found else None

    def iter_ends(self, since: float = 0.0) -> list[tuple[float, int, dict[str, Any]]]:
        """(arrival, rank, event) of the iterations completed by processes opened after ``since``."""
        with self._lock:
            conns = [c for c in self.conns if c.opened_at >= since]
            ends = [
                (at, c.rank, ev) for c in conns for at, ev in list(c.events) if ev.get("ev") == "iter_end"
            ]
        return sorted(ends, key=lambda e: (e[0], e[1]))

    def last_iteration(self) -> int:
        ends = self.iter_ends()
        return max((int(ev["it"]) for _, _, ev in ends), default=-1)

    def wait(self, predicate: Any, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"baseline: {what} not within {timeout:.0f} s")
            time.sleep(0.01)

    def send_fault(self, rank: int, fault: dict[str, Any]) -> None:
        conn = self.conn_of(rank)
        if conn is None or conn.sock is None:
            raise LookupError(f"baseline rank {rank} is not connected")
        conn.sock.sendall((json.dumps({"fault": fault}) + "\n").encode())

    def kill(self, rank: int, sig: int = signal.SIGKILL) -> float:
        conn = self.conn_of(rank)
        if conn is None:
            raise LookupError(f"baseline rank {rank} is not connected")
        t = time.time()
        os.kill(conn.pid, sig)
        return t


class TorchrunJob:
    """One ``torchrun`` (the elastic agent of one node) over the baseline worker."""

    def __init__(
        self,
        name: str,
        nproc: int,
        launch: WorkerLaunch,
        sink: EventSink,
        log_dir: Path,
        max_restarts: int = 3,
        extra_env: dict[str, str] | None = None,
        cpus: set[int] | None = None,
    ) -> None:
        """``cpus``: CPU affinity of torchrun and its workers (None: inherit)."""
        from bench.baselines.torchrun_worker import ENV_LAUNCH, ENV_TASK

        log_dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.sink = sink
        self.lines: list[tuple[float, str]] = []
        self._log = open(log_dir / f"torchrun-{name}.log", "a")  # noqa: SIM115 - closed in wait/stop
        env = dict(
            os.environ,
            PYTHONPATH=str(REPO),
            OMP_NUM_THREADS="1",
            MKL_NUM_THREADS="1",
            PYTHONUNBUFFERED="1",
            PYTHONWARNINGS="ignore",
            UNICRON_HOOK_SOCKET=str(sink.path),
        )
        env[ENV_LAUNCH] = launch.model_dump_json()
        env[ENV_TASK] = name
        env.update(extra_env or {})
        env.pop("UNICRON_ELASTIC_WAIT_S", None)
        cmd: Sequence[str] = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nnodes",
            "1",
            "--nproc-per-node",
            str(nproc),
            "--max-restarts",
            str(max_restarts),
            "--monitor-interval",
            "0.1",  # torchrun's default
            str(WORKER),
        ]
        self.started_at = time.time()
        self.proc = subprocess.Popen(
            list(cmd),
            cwd=str(REPO),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            now = time.time()
            self.lines.append((now, line))
            with contextlib.suppress(ValueError):
                self._log.write(f"{now:.3f} {line}\n")
                self._log.flush()

    def failure_noticed(self, after: float) -> float | None:
        """When the elastic agent first logged a worker failure after ``after`` (None: not yet)."""
        for t, line in list(self.lines):
            if t >= after and any(m in line for m in FAILURE_MARKERS):
                return t
        return None

    def exited_at(self) -> float | None:
        return None if self.proc.poll() is None else time.time()

    def stop(self) -> None:
        """SIGKILL torchrun and its workers (they run in sessions of their own)."""
        import psutil

        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    child.kill()
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        for conn in self.sink.live():
            with contextlib.suppress(ProcessLookupError):
                os.kill(conn.pid, signal.SIGKILL)
        with contextlib.suppress(ValueError):
            self._log.close()
