"""Celery queueing delay: from a task's publication to a worker starting it, per task name.

Two Celery signals, connected in every Django process (``MetricsConfig.ready``): ``before_task_publish``
stamps the message with the publisher's clock (header :data:`HEADER`), ``task_prerun`` (in the worker)
adds ``now - stamp`` to a histogram kept in Redis, because the publishers (daphne, beat, workers) and
the worker processes are all different processes; ``/metrics`` reads it at scrape time
(:func:`read_queue_delay`). One pipelined Redis round trip per task start. Tasks with an ETA or a
countdown are skipped (their wait is on purpose). Publisher and worker clocks must agree (NTP) for the
figure to mean anything across hosts. A Redis error never fails a task: the observation is dropped.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import redis
from celery.signals import before_task_publish, task_prerun
from django.conf import settings

log = logging.getLogger(__name__)

HEADER = "unicron_published_at"
KEY_PREFIX = "unicron:metrics:celery_queue_delay:"
INDEX_KEY = "unicron:metrics:celery_queue_delay"
"""A set of the task names observed (each has a hash ``KEY_PREFIX + name``)."""
BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@lru_cache(maxsize=1)
def _redis() -> redis.Redis:
    """A client for ``REDIS_URL``, made on first use (redis-py re-opens its connections after a fork)."""
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1.0, socket_connect_timeout=1.0)


def record_queue_delay(task_name: str, seconds: float) -> None:
    seconds = max(seconds, 0.0)
    bucket = next((f"b{i}" for i, b in enumerate(BOUNDS) if seconds <= b), "inf")
    key = KEY_PREFIX + task_name
    pipe = _redis().pipeline(transaction=False)
    pipe.sadd(INDEX_KEY, task_name)
    pipe.hincrby(key, bucket, 1)
    pipe.hincrby(key, "count", 1)
    pipe.hincrbyfloat(key, "sum", seconds)
    pipe.execute()


@dataclass(frozen=True)
class QueueDelay:
    task_name: str
    buckets: list[tuple[float, int]]
    """Cumulative counts per upper bound."""
    count: int
    sum: float


def read_queue_delay() -> list[QueueDelay]:
    """Every task name's histogram (two round trips, whatever the number of names)."""
    client = _redis()
    names = sorted(n.decode() for n in client.smembers(INDEX_KEY))  # type: ignore[union-attr]
    if not names:
        return []
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.hgetall(KEY_PREFIX + name)
    out = []
    for name, raw in zip(names, pipe.execute(), strict=True):
        fields = {k.decode(): v.decode() for k, v in raw.items()}
        running, buckets = 0, []
        for i, bound in enumerate(BOUNDS):
            running += int(fields.get(f"b{i}", 0))
            buckets.append((bound, running))
        out.append(QueueDelay(name, buckets, int(fields.get("count", 0)), float(fields.get("sum", 0.0))))
    return out


def stamp_published_at(headers: dict[str, Any] | None = None, **_: Any) -> None:
    if headers is not None:
        headers[HEADER] = time.time()


def observe_queue_delay(task: Any = None, **_: Any) -> None:
    request = getattr(task, "request", None)
    published = getattr(request, HEADER, None)
    if not isinstance(published, int | float) or getattr(request, "eta", None):
        return
    try:
        record_queue_delay(str(task.name), time.time() - published)
    except redis.RedisError as exc:
        log.debug("celery queue delay not recorded: %s", exc)


def connect_signals() -> None:
    before_task_publish.connect(stamp_published_at, weak=False, dispatch_uid="unicron-queue-delay-stamp")
    task_prerun.connect(observe_queue_delay, weak=False, dispatch_uid="unicron-queue-delay-observe")
