"""GET /metrics on the real ASGI application (daphne, real HTTP): no token and a wrong token get 401,
the token from UNICRON_METRICS_TOKEN_FILE gets the Prometheus text exposition of the database's rows."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connection
from prometheus_client.parser import text_string_to_metric_families

from controlplane.config.env import format_database_url
from tests.controlplane.factories import FailureEventFactory, TaskFactory

REPO = Path(__file__).resolve().parents[2]
TOKEN = "metrics-token-7f3a"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def daphne(transactional_db: None, tmp_path: Path) -> Iterator[str]:
    token_file = tmp_path / "metrics.token"
    token_file.write_text(TOKEN + "\n")
    port = _free_port()
    env = dict(
        os.environ,
        DATABASE_URL=format_database_url(connection.settings_dict),
        REDIS_URL=settings.REDIS_URL,
        PYTHONPATH=str(REPO),
        UNICRON_METRICS_TOKEN_FILE=str(token_file),
    )
    env.pop("UNICRON_METRICS_TOKEN", None)
    with open(tmp_path / "daphne.log", "ab") as log:
        proc = subprocess.Popen(
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
            cwd=str(REPO),
            env=env,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, (tmp_path / "daphne.log").read_text()
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                break
            assert time.monotonic() < deadline, "daphne did not start"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def test_only_the_right_bearer_token_gets_the_exposition(daphne: str) -> None:
    FailureEventFactory(detector="node_health", kind="node_lost", severity="sev1")
    TaskFactory(state="running")
    with httpx.Client(timeout=30) as http:
        missing = http.get(daphne)
        wrong = http.get(daphne, headers={"Authorization": "Bearer not-the-token"})
        other_scheme = http.get(daphne, headers={"Authorization": f"Basic {TOKEN}"})
        right = http.get(daphne, headers={"Authorization": f"Bearer {TOKEN}"})

    for refused in (missing, wrong, other_scheme):
        assert refused.status_code == 401, refused.text
        assert "unicron_" not in refused.text
        assert refused.headers["WWW-Authenticate"].startswith("Bearer")
    assert right.status_code == 200, right.text
    assert right.headers["Content-Type"].startswith("text/plain; version=")
    families = {f.name: f for f in text_string_to_metric_families(right.text)}
    assert families["unicron_failure_events"].type == "counter"
    (lost,) = families["unicron_failure_events"].samples
    assert lost.labels == {"detector": "node_health", "kind": "node_lost", "severity": "sev1"}
    assert lost.value == 1.0
    running = [s for s in families["unicron_tasks"].samples if s.labels["state"] == "running"]
    assert [s.value for s in running] == [1.0]
    assert families["unicron_transition_duration_seconds"].type == "histogram"
    assert all(f.documentation for f in families.values())  # every family has its HELP text
