"""An encoded ``/static/..%2f`` path that leaves the static directories is refused with a 400 and one
log line (no traceback) by the ASGI application daphne serves; it used to be a 500 with a traceback."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from controlplane.config.asgi import application


async def _get(path: str) -> tuple[int, bytes]:
    """One GET through the ASGI application; the status and the whole body."""
    sent: list[dict[str, Any]] = []
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Future()  # the client stays connected until the response is complete
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    await application(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


@pytest.mark.parametrize(
    "path", ["/static/../controlplane/config/settings.py", "/static/dashboard/../../../pyproject.toml"]
)
async def test_a_path_outside_the_static_dirs_is_a_400(path: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        status, body = await _get(path)

    assert status == 400
    assert b"SECRET_KEY" not in body
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert any("static path refused" in r.getMessage() for r in caplog.records)


async def test_a_static_file_is_still_served() -> None:
    status, body = await _get("/static/dashboard/js/app.js")

    assert status == 200
    assert b"import" in body
