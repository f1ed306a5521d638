"""The precomputed failure-time plans serve every Celery worker process: at 128 GPUs / 8 tasks, one
worker (its own process, consuming the orchestration queue) plans the tasks and precomputes the plans of
the likely next events; a node loss is then re-planned by a second worker process (consuming a queue of its
own) that built nothing, and its decision is still a lookup, not a fresh DP."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import transaction

from controlplane.apps.common.triggers import REPLAN, REPLAN_REQUESTS_KEY, orchestration_redis, request_replan
from controlplane.apps.fleet.choices import NodeState
from controlplane.apps.fleet.models import Node
from controlplane.apps.planning.coalescing import replan_running
from controlplane.apps.planning.models import Plan
from controlplane.apps.training.models import Allocation
from controlplane.config.celery import app
from controlplane.config.system import worker_command
from tests.controlplane.factories import NodeFactory, TaskFactory
from tests.e2e.loop import test_database_url as database_url_for_children

ROOT = Path(__file__).resolve().parents[2]
OTHER_QUEUE = "replan-elsewhere"


def quiet(client: redis.Redis) -> bool:
    return (
        client.llen(settings.ORCHESTRATION_QUEUE) == 0
        and client.llen(OTHER_QUEUE) == 0
        and client.hlen("unacked") == 0
        and client.llen(REPLAN_REQUESTS_KEY) == 0
        and not replan_running()
    )


def wait_for_plans(client: redis.Redis, count: int, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    since: float | None = None
    while time.monotonic() < deadline:
        if Plan.objects.count() >= count and quiet(client):
            since = since or time.monotonic()
            if time.monotonic() - since > 1.0:
                return
        else:
            since = None
        time.sleep(0.2)
    pytest.fail(f"{Plan.objects.count()} plans, expected {count}")


@pytest.fixture
def workers() -> Iterator[None]:
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="controlplane.config.settings",
        DATABASE_URL=database_url_for_children(),
        REDIS_URL=settings.REDIS_URL,
        UNICRON_ORCHESTRATION="true",
    )
    procs = [
        subprocess.Popen(
            [*worker_command(concurrency=1, name=f"{name}@%h"), "-Q", queue],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for name, queue in (("precomputes", settings.ORCHESTRATION_QUEUE), ("elsewhere", OTHER_QUEUE))
    ]
    try:
        yield
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.mark.django_db(transaction=True)
def test_a_node_loss_re_planned_by_a_worker_that_did_not_precompute_is_a_lookup(workers: None) -> None:
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(settings.ORCHESTRATION_QUEUE, OTHER_QUEUE, "unacked", "unacked_index", REPLAN_REQUESTS_KEY)
    nodes = [NodeFactory(devices=8) for _ in range(16)]
    for i in range(8):
        TaskFactory(weight=1.0 + i, min_workers=8, max_workers=64, num_layers=8, global_batch_size=64)
    with transaction.atomic():
        request_replan("task_submitted")  # to the orchestration queue: the first worker plans and precomputes
    wait_for_plans(client, 1)
    first = Plan.objects.get()
    assert not first.lookup

    busy = Allocation.objects.filter(active=True).values_list("device__node_id", flat=True).first()
    victim = next(n for n in nodes if n.pk == busy)
    Node.objects.filter(pk=victim.pk).update(state=NodeState.LOST)
    orchestration_redis().rpush(REPLAN_REQUESTS_KEY, "node_left")
    app.send_task(REPLAN, kwargs={"trigger": "node_left"}, queue=OTHER_QUEUE)  # only the second worker
    wait_for_plans(client, 2)

    after = Plan.objects.order_by("-created_at", "-id").first()
    assert after is not None
    assert after.trigger == "node_left"
    assert after.lookup, "the second worker planned afresh: the precomputed plans did not reach it"
    assert not Allocation.objects.filter(active=True, device__node=victim).exists()
    print(
        f"\nFIGURE node loss at 128 GPUs / 8 tasks re-planned by a Celery worker process that did not "
        f"precompute: {after.compute_time_ms:.3f} ms (lookup); the first plan's full DP "
        f"{first.compute_time_ms:.3f} ms"
    )
