"""While PostgreSQL restarts, a REST request gets a 503 with a JSON body and ``Retry-After`` — not a 500
with a traceback — and the same request is answered normally once the database is back.

A real server process (daphne) on a PostgreSQL cluster of its own (pgserver's binaries), stopped and
started again by the test."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.processes import spawn

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str, token: str | None = None) -> tuple[int, dict[str, str], Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Token {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, dict(response.headers), json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        body = error.read()
        try:
            payload = json.loads(body)
        except ValueError:
            payload = body.decode(errors="replace")
        return error.code, dict(error.headers), payload


@pytest.mark.slow
def test_a_database_restart_is_answered_503_with_retry_after(tmp_path: Path) -> None:
    import pgserver
    from django.conf import settings

    server = pgserver.get_server(str(tmp_path / "pg"), cleanup_mode="delete")  # type: ignore[attr-defined]
    daphne = None
    try:
        env = dict(
            os.environ,
            DATABASE_URL=str(server.get_uri()),
            REDIS_URL=settings.REDIS_URL,
            PYTHONPATH=str(ROOT),
            UNICRON_INSECURE_HTTP="1",
        )
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=300
        )
        port = _free_port()
        log = (tmp_path / "daphne.log").open("ab")
        daphne = spawn(
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "controlplane.config.asgi:application",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=log,
        )
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while not _up(port) or _get(f"{base}/healthz")[0] != 200:
            assert daphne.poll() is None, (tmp_path / "daphne.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "daphne did not answer within 60 s"
            time.sleep(0.2)
        api = f"{base}/api/v1/tasks/"
        # the token is looked up in the database: an unknown one is refused while PostgreSQL is up
        refused = _get(api, token="not-a-token")
        assert refused[0] == 401, refused
        assert refused[2]["detail"] == "Invalid token.", refused

        pgserver.pg_ctl(  # type: ignore[attr-defined]
            ["-w", "stop", "-m", "fast"], pgdata=server.pgdata, user=server.system_user
        )

        status, headers, body = _get(api, token="not-a-token")
        assert status == 503, body
        assert headers["Retry-After"] == "5"
        assert headers["Content-Type"] == "application/json"
        assert body["code"] == "store_unavailable"
        assert "database is unavailable" in body["detail"]
        assert _get(f"{base}/healthz")[0] == 503

        server.ensure_postgres_running()

        assert _get(api, token="not-a-token")[2] == refused[2]
        assert _get(f"{base}/healthz")[0] == 200
        daphne_log = (tmp_path / "daphne.log").read_text()
        assert "Traceback" not in daphne_log, daphne_log[-3000:]
        assert "database unavailable" in daphne_log
    finally:
        if daphne is not None:
            daphne.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                daphne.wait(10)
            if daphne.poll() is None:
                daphne.kill()
        server.cleanup()


def _up(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False
