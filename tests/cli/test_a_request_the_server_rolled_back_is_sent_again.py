"""The API answers 503 with code ``retry`` when PostgreSQL rolled the request back (a deadlock: nothing
was written); unicron sends it again after Retry-After."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.cli.harness import Cli

ROLLED_BACK = {
    "detail": "The request collided with a concurrent change (deadlock) and was rolled back: nothing was "
    "changed. Send it again.",
    "code": "retry",
}
PAGE = {"count": 0, "next": None, "previous": None, "results": []}


def _server(rollbacks: int) -> tuple[ThreadingHTTPServer, list[str]]:
    """Answers the first ``rollbacks`` requests with the retry 503, then an empty page."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append(f"{self.command} {self.path}")
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            status, body = (503, ROLLED_BACK) if len(seen) <= rollbacks else (200, PAGE)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Retry-After", "0")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self._answer()

        def log_message(self, format: str, *args: object) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler), seen


Serve = Callable[[int], tuple[str, list[str]]]


@pytest.fixture
def serve() -> Iterator[Serve]:
    started: list[ThreadingHTTPServer] = []

    def start(rollbacks: int) -> tuple[str, list[str]]:
        server, seen = _server(rollbacks)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", seen

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def test_a_rolled_back_request_is_sent_again_and_succeeds(tmp_path: Path, serve: Serve) -> None:
    url, seen = serve(2)

    result = Cli(url, tmp_path, token="uapi_x").as_user("tasks", "list", "-o", "json")

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == PAGE
    assert len(seen) == 3


def test_a_request_rolled_back_every_time_exits_4_with_the_api_words(tmp_path: Path, serve: Serve) -> None:
    url, seen = serve(100)

    result = Cli(url, tmp_path, token="uapi_x").as_user("tasks", "cancel", "7")

    assert result.returncode == 4
    assert "server error (HTTP 503): The request collided with a concurrent change" in result.stderr
    assert seen == ["POST /api/v1/tasks/7/cancel/"] * 4
