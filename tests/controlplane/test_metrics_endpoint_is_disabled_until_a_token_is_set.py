"""GET /metrics over real HTTP with UNICRON_METRICS_TOKEN unset (or its file empty): 403 with a message
saying how to enable it, whatever the client sends; nothing is exposed."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from pytest_django.live_server_helper import LiveServer


def test_metrics_are_refused_with_how_to_enable_them(
    live_server: LiveServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("UNICRON_METRICS_TOKEN", raising=False)
    monkeypatch.delenv("UNICRON_METRICS_TOKEN_FILE", raising=False)
    url = f"{live_server.url}/metrics"
    with httpx.Client(timeout=30) as http:
        unset = http.get(url)
        empty_bearer = http.get(url, headers={"Authorization": "Bearer"})
        empty_file = tmp_path / "token"
        empty_file.write_text("\n")
        monkeypatch.setenv("UNICRON_METRICS_TOKEN_FILE", str(empty_file))
        from_empty_file = http.get(url, headers={"Authorization": "Bearer"})
        monkeypatch.setenv("UNICRON_METRICS_TOKEN_FILE", str(tmp_path / "missing"))
        unreadable = http.get(url)

    for refused in (unset, empty_bearer, from_empty_file):
        assert refused.status_code == 403
        assert "set UNICRON_METRICS_TOKEN" in refused.text
        assert "unicron_" not in refused.text.replace("UNICRON_METRICS_TOKEN", "")
    assert unreadable.status_code == 503
    assert "UNICRON_METRICS_TOKEN_FILE cannot be read" in unreadable.text
