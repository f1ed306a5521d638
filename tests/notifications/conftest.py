"""Fixtures of the alert-notification tests: real HTTP and SMTP receivers, a real Celery worker process
on the test database and the configured Redis, routes and alerts."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import connection
from rest_framework.test import APIClient

from controlplane.apps.accounts.roles import Role
from controlplane.apps.incidents.choices import Severity
from controlplane.apps.incidents.models import Alert
from controlplane.apps.incidents.services import do_raise_alert
from controlplane.apps.notifications.models import AlertRoute
from controlplane.config.env import format_database_url
from tests.controlplane.conftest import make_user
from tests.controlplane.factories import FailureEventFactory
from tests.notifications.receivers import HttpReceiver, SmtpSink, wait_for
from tests.processes import spawn

REPO = Path(__file__).resolve().parents[2]
SECRET = "route-secret-0123456789"
WORKER_ENV = {
    # fast backoff for the tests: 0.4 s, 0.8 s, 1.6 s, ... (production: 5 s doubling up to 600 s)
    "UNICRON_ALERT_RETRY_BASE_S": "0.4",
    "UNICRON_ALERT_RETRY_MAX_S": "3",
    "UNICRON_ALERT_MAX_ATTEMPTS": "5",
    "UNICRON_ALERT_HTTP_TIMEOUT_S": "10",
    "UNICRON_ORCHESTRATION": "false",
}


@pytest.fixture
def make_receiver() -> Iterator[Callable[..., HttpReceiver]]:
    started: list[HttpReceiver] = []

    def make(script: list[int] | None = None, answer: str = "ok") -> HttpReceiver:
        receiver = HttpReceiver(script=list(script or []), answer=answer).start()
        started.append(receiver)
        return receiver

    yield make
    for receiver in started:
        receiver.stop()


@pytest.fixture
def smtp_sink() -> Iterator[SmtpSink]:
    sink = SmtpSink().start()
    yield sink
    sink.stop()


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""


@pytest.fixture(scope="package")  # torn down after this package: no worker consumes later tests' tasks
def celery_worker(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Worker]:
    """A real ``celery worker`` (2 prefork processes) on the test database and the test Redis."""
    redis.Redis.from_url(settings.REDIS_URL).delete("celery")  # stale messages of earlier runs
    with django_db_blocker.unblock():
        database_url = format_database_url(connection.settings_dict)
    env = dict(os.environ, DATABASE_URL=database_url, REDIS_URL=settings.REDIS_URL, **WORKER_ENV)
    log = tmp_path_factory.mktemp("celery") / "worker.log"
    with open(log, "ab") as out:
        process = spawn(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "controlplane.config.celery",
                "worker",
                "--concurrency=2",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-l",
                "INFO",
            ],
            cwd=str(REPO),
            env=env,
            stdout=out,
            stderr=out,
        )
    worker = Worker(process, log)
    try:
        wait_for("the Celery worker to be ready", lambda: "ready." in worker.tail() or process.poll(), 180)
        assert process.poll() is None, worker.tail()
        yield worker
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture
def operator_client(db: None) -> APIClient:
    client = APIClient()
    client.force_authenticate(make_user(Role.OPERATOR))
    return client


def webhook_route(name: str, url: str, **fields: Any) -> AlertRoute:
    return AlertRoute.objects.create(name=name, destination="webhook", url=url, secret=SECRET, **fields)


def raise_alert(severity: Severity = Severity.SEV1, kind: str = "node_lost", message: str = "") -> Alert:
    event = FailureEventFactory(kind=kind, severity=severity)
    return do_raise_alert(severity, message or f"{kind} on {event.node.name}", source_event=event)
