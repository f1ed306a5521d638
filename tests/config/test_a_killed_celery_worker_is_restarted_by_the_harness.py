"""The whole-system harness supervises its services: a Celery worker killed (SIGKILL, as a crash) is started
again after a back-off, the console says what died, its exit code and the restart's number, and the system
keeps working (the new worker answers, daphne still serves); stopping the harness leaves nothing running."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest

from controlplane.config.env import format_database_url
from controlplane.config.system import System
from tests.processes import alive, spawn


@pytest.mark.slow
def test_a_killed_celery_worker_is_restarted_and_the_system_keeps_working(
    transactional_db: None, tmp_path: Path
) -> None:
    from django.conf import settings
    from django.db import connection

    from controlplane.config.celery import app

    database_url = format_database_url(connection.settings_dict)  # the test database
    said: list[str] = []
    system = System(tmp_path, spawn=spawn, say=said.append)
    system.start_stores(database_url, settings.REDIS_URL)
    pids: list[int] = []
    try:
        system.start_web()
        worker = system.start_worker(concurrency=1, name="h-supervised@%h")
        system.start_beat()
        system.wait_ready(90)
        assert worker.process is not None
        first = worker.process.pid
        pids.append(first)
        deadline = time.monotonic() + 90
        while not app.control.ping(destination=[f"h-supervised@{_host()}"], timeout=1.0):
            assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-3000:]

        system.kill("worker")

        deadline = time.monotonic() + 60
        while "worker restarted (restart 1)" not in said:
            assert time.monotonic() < deadline, said
            system.supervise()
            time.sleep(0.2)
        assert any(line.startswith("worker died (exit code -9); restart 1 in 1 s") for line in said), said
        assert worker.process.pid != first
        pids.append(worker.process.pid)
        deadline = time.monotonic() + 90
        while not app.control.ping(destination=[f"h-supervised@{_host()}"], timeout=1.0):
            assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-3000:]
            system.supervise()
        with urllib.request.urlopen(f"{system.base_url}/healthz", timeout=10) as response:
            assert response.status == 200
        assert not system.exited("beat")
        assert not system.exited("web")
        pids += [c.process.pid for c in system.children.values() if c.process is not None]
    finally:
        system.stop()
    assert not [pid for pid in pids if alive(pid)]


def _host() -> str:
    import socket

    return socket.gethostname()
