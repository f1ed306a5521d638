from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.cli.harness import Cli
from tests.e2e.loop import free_port


class _Broken(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<h1>Server Error (500)</h1>"
        self.send_response(500)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Redirecting(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(301)
        self.send_header("Location", f"https://127.0.0.1{self.path}")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def _serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def broken_server() -> Iterator[str]:
    """An HTTP server that answers every request with a 500 page (a proxy in front of a dead app)."""
    yield from _serve(_Broken)


@pytest.fixture
def https_only_server() -> Iterator[str]:
    """A server that redirects plain HTTP to https:// (the control plane's default without DEBUG)."""
    yield from _serve(_Redirecting)


def _run(tmp_path: Path, server: str, *args: str) -> subprocess.CompletedProcess[str]:
    cli = Cli(server, tmp_path, token="uapi_anything")
    return cli.as_user(*args)


def test_a_server_nobody_listens_on_exits_4(tmp_path: Path) -> None:
    server = f"http://127.0.0.1:{free_port()}"

    result = _run(tmp_path, server, "tasks", "list")

    assert result.returncode == 4
    assert f"server error (no answer): cannot reach {server}" in result.stderr


def test_a_login_to_a_server_nobody_listens_on_exits_4_and_stores_nothing(tmp_path: Path) -> None:
    cli = Cli(f"http://127.0.0.1:{free_port()}", tmp_path)

    result = cli.run("login", "--server", cli.server, "--token", "uapi_anything")

    assert result.returncode == 4
    assert not cli.config.exists()


def test_a_server_error_exits_4_with_its_status(tmp_path: Path, broken_server: str) -> None:
    result = _run(tmp_path, broken_server, "alerts", "list")

    assert result.returncode == 4
    assert "server error (HTTP 500): HTTP 500 Internal Server Error" in result.stderr


def test_a_redirect_to_https_exits_4_naming_the_address(tmp_path: Path, https_only_server: str) -> None:
    result = _run(tmp_path, https_only_server, "tasks", "list")

    assert result.returncode == 4
    assert "the server redirects /api/v1/tasks/ to https://127.0.0.1/api/v1/tasks/" in result.stderr
