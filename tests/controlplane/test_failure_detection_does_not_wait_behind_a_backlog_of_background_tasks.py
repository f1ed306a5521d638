"""The orchestration loop's Celery tasks (node health, failure handling, transitions, re-plans) have a
queue of their own: with hundreds of background tasks (metrics, simulations, alert deliveries) waiting,
a node-health sweep published after them starts while most of them still wait, on a worker started without
``-Q`` (it consumes both queues)."""

from __future__ import annotations

import time

import redis
from celery.contrib.testing.worker import start_worker
from django.conf import settings

from controlplane.apps.metrics import celery_latency
from controlplane.config.celery import app

BACKLOG = 300
BACKGROUND = "metrics.sample_cluster_waf"
URGENT = "fleet.check_node_health"


def test_every_orchestration_task_is_routed_to_its_own_queue() -> None:
    for name in (URGENT, "incidents.handle_failure", "planning.replan", "planning.advance_transition"):
        assert app.amqp.router.route({}, name)["queue"].name == settings.ORCHESTRATION_QUEUE
    for name in (BACKGROUND, "notifications.deliver_alert", "simulations.run"):
        assert app.amqp.router.route({}, name)["queue"].name == settings.CELERY_TASK_DEFAULT_QUEUE


def test_a_sweep_starts_while_the_background_backlog_waits(transactional_db: None) -> None:
    client = redis.Redis.from_url(settings.REDIS_URL)
    queues = (settings.CELERY_TASK_DEFAULT_QUEUE, settings.ORCHESTRATION_QUEUE)
    client.delete(*queues, celery_latency.INDEX_KEY, celery_latency.KEY_PREFIX + URGENT)
    for _ in range(BACKLOG):
        app.send_task(BACKGROUND)
    app.send_task(URGENT)
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
            deadline = time.monotonic() + 120
            while client.llen(settings.ORCHESTRATION_QUEUE) > 0:
                assert time.monotonic() < deadline, "the sweep was never taken"
                time.sleep(0.05)
            left = client.llen(settings.CELERY_TASK_DEFAULT_QUEUE)
    finally:
        client.delete(*queues)
    assert left > BACKLOG // 2, f"the sweep waited until only {left} of {BACKLOG} background tasks were left"
