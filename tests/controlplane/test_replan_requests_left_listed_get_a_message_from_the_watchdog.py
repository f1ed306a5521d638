"""Re-plan requests stay listed until a plan answered them: requests a killed worker (or a lost message) left
behind get a ``planning.replan`` message from the transition watchdog, unless a re-plan holds the re-plan
lock (it will plan for them itself)."""

from __future__ import annotations

import json
import time

import psycopg
import pytest
import redis
from django.conf import settings

from controlplane.apps.common.triggers import REPLAN, REPLAN_REQUESTS_KEY
from controlplane.apps.planning.coalescing import REPLAN_LOCK_KEY, replan_running, request_listed_replans
from tests.e2e.loop import test_database_url as database_url_for_children

QUEUE = "orchestration"  # where the re-plans are routed (settings.CELERY_TASK_ROUTES)


def queued_replans(client: redis.Redis) -> int:
    return sum(
        json.loads(raw).get("headers", {}).get("task") == REPLAN for raw in client.lrange(QUEUE, 0, -1)
    )


@pytest.mark.django_db(transaction=True)
def test_listed_requests_get_a_message_unless_a_replan_runs() -> None:
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(QUEUE, REPLAN_REQUESTS_KEY)
    try:
        assert not request_listed_replans()  # nothing listed: nothing sent
        client.rpush(REPLAN_REQUESTS_KEY, "node_joined", "node_left")

        with psycopg.connect(database_url_for_children(), autocommit=True) as other:  # a worker re-planning
            other.execute("SELECT pg_advisory_lock(%s)", [REPLAN_LOCK_KEY])
            assert replan_running()
            assert not request_listed_replans()
            assert queued_replans(client) == 0
        deadline = time.monotonic() + 5.0
        while replan_running() and time.monotonic() < deadline:  # the server ends the session
            time.sleep(0.05)
        assert not replan_running()  # its connection closed: the lock went with it

        assert request_listed_replans()
        assert queued_replans(client) == 1
        assert client.llen(REPLAN_REQUESTS_KEY) == 2  # still listed: the message's plan answers them
    finally:
        client.delete(QUEUE, REPLAN_REQUESTS_KEY)
