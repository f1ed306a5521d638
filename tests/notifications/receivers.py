"""Real receivers for alert deliveries: an HTTP server that records requests and answers a script of
status codes, and an SMTP sink. Both run in threads of the test process."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

from aiosmtpd.controller import Controller

T = TypeVar("T")


def wait_for(what: str, predicate: Callable[[], T | None], timeout: float = 60.0, every: float = 0.05) -> T:
    """Poll until ``predicate`` returns something truthy (a loaded host gets generous deadlines)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.monotonic() when it arrived
    status: int  # what the receiver answered


@dataclass
class HttpReceiver:
    """Answers each POST with the next status of ``script`` (then ``default``), recording it."""

    script: list[int] = field(default_factory=list)
    default: int = 200
    answer: str = "ok"
    requests: list[Received] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def start(self) -> HttpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    status = receiver.script.pop(0) if receiver.script else receiver.default
                    receiver.requests.append(
                        Received(self.path, dict(self.headers.items()), body, time.monotonic(), status)
                    )
                payload = receiver.answer.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def received(self) -> list[Received]:
        with self.lock:
            return list(self.requests)


@dataclass(frozen=True)
class Mail:
    mail_from: str
    rcpt_tos: list[str]
    content: bytes


class SmtpSink:
    """A plain-SMTP server on 127.0.0.1 that keeps every message it is given."""

    def __init__(self) -> None:
        self.messages: list[Mail] = []
        self.port = free_port()
        self.controller = Controller(self, hostname="127.0.0.1", port=self.port)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd hook
        self.messages.append(Mail(envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
        return "250 OK"

    def start(self) -> SmtpSink:
        self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()
