"""The whole control plane on one machine, started and stopped as one: the harness of ``make demo``, the
recovery bench and the end-to-end tests.

:class:`System` starts PostgreSQL and Redis (the given URLs, or the embedded servers, started here and
stopped with the system), migrates, and runs daphne, a Celery worker, Celery beat and node agents as child
processes. Every child gets its settings in an environment of its own (:meth:`System.env`: this process's
environment, the store URLs and the system's settings); nothing is written into ``os.environ``. Each child
runs in a session of its own, so that stopping it stops whatever it started (an agent's workers).

A *supervised* child (daphne, the Celery worker and beat in the demo) that dies is started again after a
back-off that doubles from :data:`RESTART_BACKOFF_S` up to :data:`RESTART_BACKOFF_MAX_S` (reset once the
child ran :data:`STABLE_AFTER_S`), and :meth:`System.supervise` says so: what died, its exit code and the
restart's number. Other children (the agents, which a node-loss drill kills on purpose) are reported once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from controlplane.config.embedded import embedded_servers_here, start_servers, stop_servers

ROOT = Path(__file__).resolve().parents[2]

RESTART_BACKOFF_S = 1.0
RESTART_BACKOFF_MAX_S = 30.0
STABLE_AFTER_S = 60.0
"""A supervised child that ran this long before it died is restarted after :data:`RESTART_BACKOFF_S` again."""
STOP_GRACE_S = 15.0


class Spawn(Protocol):
    """How a child is started: ``subprocess.Popen`` by default; the tests pass ``tests.processes.spawn``
    (which also kills the child with the test run)."""

    def __call__(self, command: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]: ...


def popen(command: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(list(command), **kwargs)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# ---------------------------------------------------------------------------------------- commands
def web_command(host: str, port: int) -> list[str]:
    """daphne serving the ASGI application: the REST API, the dashboard and the agent links."""
    return [
        sys.executable,
        "-m",
        "daphne",
        "-b",
        host,
        "-p",
        str(port),
        "controlplane.config.asgi:application",
    ]


def worker_command(
    *, embedded_beat: bool = False, concurrency: int = 2, name: str | None = None
) -> list[str]:
    """A Celery worker; ``embedded_beat`` runs beat inside it (the tests and the bench: one process), with
    the database scheduler, and without gossip, mingle and heartbeats (one worker, nothing to agree on)."""
    command = [sys.executable, "-m", "celery", "-A", "controlplane.config.celery", "worker", "-l", "INFO"]
    command += [f"--concurrency={concurrency}"]
    if name is not None:
        command += ["-n", name]
    if embedded_beat:
        # (a worker's -S is its state db file, not the beat scheduler)
        command += ["-B", "--scheduler", "django_celery_beat.schedulers:DatabaseScheduler"]
        command += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    return command


def beat_command(schedule_file: Path) -> list[str]:
    """Celery beat on its own (the demo)."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "controlplane.config.celery",
        "beat",
        "-l",
        "INFO",
        "--schedule",
        str(schedule_file),
    ]


def agent_command(
    coordinator: str,
    node: str,
    run_dir: Path,
    *,
    devices: int,
    worker: str,
    token: str | None = None,
    token_file: Path | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """A node agent (``python -m agents``) for ``node``, authenticating with its token file; a token given
    as such is written to ``run_dir/token`` (owner-only) first: a command line is readable by every user
    of the machine (``ps``), a token on it would be too."""
    if token_file is None:
        if not token:
            raise ValueError(f"agent {node}: a token or a token file is needed")
        run_dir.mkdir(parents=True, exist_ok=True)
        token_file = run_dir / "token"
        token_file.touch(mode=0o600)
        token_file.chmod(0o600)
        token_file.write_text(token)
    auth = ["--token-file", str(token_file)]
    return [
        sys.executable,
        "-m",
        "agents",
        "--coordinator",
        coordinator,
        *auth,
        "--devices",
        str(devices),
        "--worker",
        worker,
        "--node",
        node,
        "--run-dir",
        str(run_dir),
        *extra,
    ]


# ---------------------------------------------------------------------------------------- children
@dataclass
class Child:
    """One process of the system, started again under the same name when it is restarted."""

    name: str
    command: list[str]
    env: dict[str, str]
    log_path: Path
    supervised: bool
    preexec_fn: Callable[[], None] | None = None
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0
    backoff_s: float = RESTART_BACKOFF_S
    restart_due: float | None = None
    reported: bool = False

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class System:
    """The whole system on this machine (see the module's docstring).

    ``settings`` are the ``UNICRON_*`` (and Django) variables every child gets; ``run_dir`` holds the logs
    (``<name>.log``) and the beat schedule."""

    run_dir: Path
    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    more_web_ports: list[int] = field(default_factory=list)
    """The ports of the ASGI servers after the first (``web-2``, ``web-3``…): see :meth:`start_web`."""
    settings: dict[str, str] = field(default_factory=dict)
    spawn: Spawn = popen
    say: Callable[[str], None] = print
    urls: dict[str, str] = field(default_factory=dict)
    children: dict[str, Child] = field(default_factory=dict)
    stopping: bool = False
    owns_stores: bool = False

    # ------------------------------------------------------------------ stores
    def start_stores(self, database_url: str | None = None, redis_url: str | None = None) -> dict[str, str]:
        """PostgreSQL and Redis: the given URLs, else the configured ones, else the embedded servers
        (started here, stopped by :meth:`stop`)."""
        before = embedded_servers_here()
        embedded = start_servers() if database_url is None or redis_url is None else {}
        self.owns_stores = embedded_servers_here() > before
        self.urls = {
            "DATABASE_URL": database_url or embedded["DATABASE_URL"],
            "REDIS_URL": redis_url or embedded["REDIS_URL"],
        }
        return self.urls

    def migrate(self) -> None:
        """``manage.py migrate`` against the system's database (a child with the system's settings)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with (self.run_dir / "migrate.log").open("ab") as log:
            done = subprocess.run(
                [sys.executable, str(ROOT / "manage.py"), "migrate", "--no-input", "-v0"],
                cwd=ROOT,
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if done.returncode != 0:
            raise RuntimeError(
                f"migrate failed with code {done.returncode} (see {self.run_dir / 'migrate.log'})"
            )

    # ------------------------------------------------------------------ children
    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a child: this process's, the store URLs, the system's settings, ``extra``."""
        assert self.urls, "start_stores() first: a child needs the store URLs"
        return {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            "DJANGO_SETTINGS_MODULE": "controlplane.config.settings",
            **self.urls,
            **self.settings,
            **extra,
        }

    def start(
        self,
        name: str,
        command: list[str],
        *,
        supervised: bool = False,
        env: Mapping[str, str] | None = None,
        preexec_fn: Callable[[], None] | None = None,
        log_path: Path | None = None,
    ) -> Child:
        """Start (or start again) the child ``name``; ``env`` is added to :meth:`env`; its output goes to
        ``log_path`` (default ``<run_dir>/<name>.log``)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_path or self.run_dir / f"{name}.log"
        child = Child(name, command, self.env(**(env or {})), log_path, supervised, preexec_fn)
        previous = self.children.get(name)
        if previous is not None:
            self.kill(name)
            child.restarts, child.backoff_s = previous.restarts, previous.backoff_s
        self.children[name] = child
        self._launch(child)
        return child

    def _launch(self, child: Child) -> None:
        kwargs: dict[str, Any] = {}
        if child.preexec_fn is not None:
            kwargs["preexec_fn"] = child.preexec_fn
        with child.log_path.open("ab") as log:  # the child keeps its own descriptor
            child.process = self.spawn(
                child.command,
                cwd=str(ROOT),
                env=child.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **kwargs,
            )
        child.started_at = time.monotonic()
        child.restart_due = None
        child.reported = False

    def start_web(self, processes: int = 1) -> list[Child]:
        """``processes`` ASGI servers: ``web`` on :attr:`port`, ``web-2``, ``web-3``… on ports of their own. A
        deployment puts them behind one balancer; here :attr:`agent_urls` names each, and a harness spreads
        its agents over them. Each is supervised (restarted on its own port)."""
        if processes < 1:
            raise ValueError(f"an ASGI server count must be at least 1, not {processes}")
        while len(self.more_web_ports) < processes - 1:
            self.more_web_ports.append(free_port())
        ports = [self.port, *self.more_web_ports[: processes - 1]]
        return [
            self.start("web" if i == 0 else f"web-{i + 1}", web_command(self.host, port), supervised=True)
            for i, port in enumerate(ports)
        ]

    def start_worker(self, log_path: Path | None = None, **options: Any) -> Child:
        return self.start("worker", worker_command(**options), supervised=True, log_path=log_path)

    def start_beat(self) -> Child:
        return self.start("beat", beat_command(self.run_dir / "celerybeat-schedule"), supervised=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def agent_url(self) -> str:
        return f"ws://{self.host}:{self.port}/ws/agent/"

    @property
    def agent_urls(self) -> list[str]:
        """The agent-link address of every ASGI server started (:meth:`start_web`), the first first."""
        return [f"ws://{self.host}:{port}/ws/agent/" for port in self.web_ports]

    @property
    def web_ports(self) -> list[int]:
        """The port of every ASGI server started (:meth:`start_web`), the first first."""
        more = [p for i, p in enumerate(self.more_web_ports) if f"web-{i + 2}" in self.children]
        return [self.port, *more]

    def wait_ready(self, timeout_s: float = 60.0) -> float:
        """Wait until every ASGI server's ``/healthz`` answers 200; returns the seconds that took. A
        supervised child that exits meanwhile is a start-up failure (no back-off here: it would only
        fail again)."""
        began = time.monotonic()
        for port in self.web_ports:
            self._wait_healthy(f"http://{self.host}:{port}", began, timeout_s)
        return time.monotonic() - began

    def _wait_healthy(self, base_url: str, began: float, timeout_s: float) -> None:
        while True:
            for child in self.children.values():
                if child.supervised and child.process is not None and child.process.poll() is not None:
                    raise RuntimeError(
                        f"{child.name} exited with code {child.process.returncode} during start-up "
                        f"(see {child.log_path})"
                    )
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{base_url}/healthz", timeout=1) as r,
            ):
                if r.status == 200:
                    return
            if time.monotonic() - began > timeout_s:
                raise RuntimeError(f"{base_url}/healthz did not answer within {timeout_s:.0f} s")
            time.sleep(0.2)

    def exited(self, name: str) -> bool:
        child = self.children.get(name)
        return child is not None and child.process is not None and child.process.poll() is not None

    def kill(self, name: str, signum: int = signal.SIGKILL) -> None:
        """Signal the child's whole session (SIGKILL: as a crash would) and wait for the child."""
        child = self.children.get(name)
        if child is None or child.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.process.pid, signum)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.process.wait(10)

    # ------------------------------------------------------------------ supervision
    def supervise(self) -> list[str]:
        """One round: report children that died; start supervised ones again when their back-off is over.
        Returns the names of the unsupervised children that died since the last round."""
        died: list[str] = []
        now = time.monotonic()
        for child in list(self.children.values()):
            if self.stopping or child.process is None or child.process.poll() is None:
                continue
            if child.supervised and child.restart_due is not None:
                if now >= child.restart_due:
                    child.restarts += 1
                    self._launch(child)
                    self.say(f"{child.name} restarted (restart {child.restarts})")
                continue
            if child.reported:
                continue
            child.reported = True
            code = child.process.returncode
            if not child.supervised:
                self.say(f"{child.name} exited with code {code}; see {child.log_path}")
                died.append(child.name)
                continue
            if now - child.started_at >= STABLE_AFTER_S:
                child.backoff_s = RESTART_BACKOFF_S
            child.restart_due = now + child.backoff_s
            self.say(
                f"{child.name} died (exit code {code}); restart {child.restarts + 1} in "
                f"{child.backoff_s:g} s; see {child.log_path}"
            )
            child.backoff_s = min(child.backoff_s * 2, RESTART_BACKOFF_MAX_S)
        return died

    # ------------------------------------------------------------------ stopping
    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stop every child (agents first, then beat, the worker, daphne: SIGTERM to each session, to the
        Celery worker's main process alone, SIGKILL what is left after ``grace_s``), then the embedded servers
        this process started."""
        self.stopping = True
        order = sorted(self.children.values(), key=_stop_rank)
        for child in order:
            if child.running:
                assert child.process is not None
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    if child.name in STOP_LEADER_ONLY:
                        os.kill(child.process.pid, signal.SIGTERM)
                    else:
                        os.killpg(child.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for child in order:
            if child.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.process.wait(max(0.0, deadline - time.monotonic()))
        for child in order:
            if child.process is not None:
                # the session may outlive its leader (a worker an agent started): kill the group regardless
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.process.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.process.wait(5)
        if self.owns_stores:
            stop_servers()
            self.owns_stores = False


STOP_LEADER_ONLY = ("worker",)
"""Children whose SIGTERM goes to their main process alone: the Celery worker stops its pool itself (a warm
shutdown lets the task in flight finish); signalled as a group, its pool processes died beside it and the
task in flight was lost as ``WorkerLostError``. What is left after the grace is killed as a group."""

STOP_ORDER = ("beat", "worker", "web")
"""The services stop after the agents, in this order: the agent links close while daphne still answers."""


def _stop_rank(child: Child) -> int:
    return STOP_ORDER.index(child.name) + 1 if child.name in STOP_ORDER else 0
