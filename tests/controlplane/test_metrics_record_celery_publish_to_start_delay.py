"""Celery queueing delay: a task published through the real Redis broker and started by a real Celery
worker lands in ``unicron_celery_task_queue_delay_seconds{task=...}`` (publish stamped by the
publisher, start observed by the worker, the histogram kept in Redis); a task with a countdown is
not counted (its wait is on purpose)."""

from __future__ import annotations

import time

import redis
from celery.contrib.testing.worker import start_worker
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from controlplane.apps.metrics import celery_latency
from controlplane.apps.metrics.exposition import render_exposition
from controlplane.apps.metrics.models import MetricSample
from controlplane.config.celery import app

TASK = "metrics.sample_cluster_waf"


def _samples_of(task: str) -> dict[str, float]:
    text = render_exposition().decode()
    family = next(
        f for f in text_string_to_metric_families(text) if f.name == "unicron_celery_task_queue_delay_seconds"
    )
    return {
        s.name.removeprefix(family.name) + s.labels.get("le", ""): s.value
        for s in family.samples
        if s.labels["task"] == task
    }


def _wait(condition: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_started_task_records_its_queueing_delay(transactional_db: None) -> None:
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete("celery", celery_latency.INDEX_KEY, celery_latency.KEY_PREFIX + TASK)
    assert _samples_of(TASK) == {}

    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
        app.send_task(TASK)
        _wait(lambda: MetricSample.objects.filter(kind="cluster_waf").count() == 1, 120)
        _wait(lambda: _samples_of(TASK).get("_count") == 1.0, 30)
        app.send_task(TASK, countdown=0.5)
        _wait(lambda: MetricSample.objects.filter(kind="cluster_waf").count() == 2, 120)

    samples = _samples_of(TASK)
    assert samples["_count"] == 1.0  # the countdown task ran but was not counted
    assert samples["_bucket+Inf"] == 1.0
    assert 0.0 <= samples["_sum"] < 60.0
    assert samples["_bucket60.0"] == 1.0
