"""Re-plans coalesce: fifty nodes joining in a burst, each asking for a re-plan, send one message (the
others are that message's to plan) and are planned for by a real Celery worker (two processes) in one
re-plan or two, not fifty, and the last plan counts every joined node's device. The requests are levels,
not edges: a re-plan reads the whole current state."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis
from django.conf import settings

from controlplane.apps.common.triggers import REPLAN_REQUESTS_KEY, REPLAN_SENT_KEY, REPLAN_SENT_TTL_S
from controlplane.apps.fleet.liveness import revive_node
from controlplane.apps.fleet.models import Node
from controlplane.apps.planning.coalescing import replan_running
from controlplane.apps.planning.models import Plan
from controlplane.apps.training.models import Allocation
from controlplane.config.system import worker_command
from tests.controlplane.factories import NodeFactory, TaskFactory
from tests.e2e.loop import test_database_url as database_url_for_children

ROOT = Path(__file__).resolve().parents[2]
JOINS = 50
QUEUE = "orchestration"  # where the re-plans are routed (settings.CELERY_TASK_ROUTES)


def quiet(client: redis.Redis) -> bool:
    """Nothing left to do: no message queued or held by the worker, no request listed, no re-plan running."""
    return (
        client.llen(QUEUE) == 0
        and client.hlen("unacked") == 0
        and client.llen(REPLAN_REQUESTS_KEY) == 0
        and not replan_running()
    )


@pytest.mark.django_db(transaction=True)
def test_fifty_joins_in_a_burst_are_planned_by_one_or_two_replans() -> None:
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(QUEUE, "unacked", "unacked_index", REPLAN_REQUESTS_KEY, REPLAN_SENT_KEY)
    NodeFactory(devices=1)
    joining = [NodeFactory(devices=1, state="joining") for _ in range(JOINS)]
    task = TaskFactory(weight=1.0, min_workers=1, max_workers=64)

    started = time.monotonic()
    for node in joining:  # each join commits and asks for a re-plan, as an agent's first warm heartbeat does
        assert revive_node(node.pk) == "healthy"
    burst_s = time.monotonic() - started
    assert client.llen(REPLAN_REQUESTS_KEY) == JOINS
    # one message on its way at a time (another once the first's hold expires, on a slow host)
    assert client.llen(QUEUE) <= 1 + int(burst_s / REPLAN_SENT_TTL_S), (client.llen(QUEUE), burst_s)

    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="controlplane.config.settings",
        DATABASE_URL=database_url_for_children(),
        REDIS_URL=settings.REDIS_URL,
        UNICRON_ORCHESTRATION="true",
    )
    worker = subprocess.Popen(
        worker_command(concurrency=2, name="coalescing@%h"),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180.0
        quiet_since: float | None = None
        while time.monotonic() < deadline:
            if Plan.objects.exists() and quiet(client):
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 2.0:
                    break
            else:
                quiet_since = None
            time.sleep(0.2)
        else:
            pytest.fail(
                f"the worker did not finish: {Plan.objects.count()} plans, queue {client.llen(QUEUE)}"
            )
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()

    plans = list(Plan.objects.order_by("created_at", "id"))
    print(f"\nFIGURE {JOINS} join triggers in a burst -> {len(plans)} re-plan(s)")
    assert 1 <= len(plans) <= 2, [p.trigger for p in plans]
    assert all(p.trigger == "node_joined" for p in plans)
    last = plans[-1]
    assert last.input_snapshot["capacity"] == JOINS + 1
    assert len(last.input_snapshot["usable_nodes"]) == JOINS + 1
    assert Node.objects.filter(state="healthy").count() == JOINS + 1
    assert Allocation.objects.filter(task=task, active=True).exists()
