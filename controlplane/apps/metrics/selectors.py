"""Time-range queries of metric series, downsampled in SQL to at most ``max_points`` buckets."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Avg, Count, F, FloatField, Func, IntegerField, Max, Min, Value
from django.db.models.functions import Cast, Floor, Least
from django.utils import timezone

from controlplane.apps.metrics.models import MetricSample


class EpochSeconds(Func):
    """``EXTRACT(EPOCH FROM expr)`` as a float (PostgreSQL)."""

    template = "EXTRACT(EPOCH FROM %(expressions)s)::double precision"
    output_field = FloatField()


@dataclass(frozen=True)
class Point:
    at: datetime
    """Start of the bucket."""
    value: float
    """Average of the bucket's samples."""
    min: float
    max: float
    count: int


@dataclass(frozen=True)
class Series:
    kind: str
    task_id: int | None
    since: datetime | None
    until: datetime
    bucket_seconds: float
    points: list[Point]


def list_series(
    kind: str,
    task_id: int | None,
    since: datetime | None,
    until: datetime | None,
    max_points: int,
) -> Series:
    """Samples of ``kind`` (cluster-wide when ``task_id`` is None) in ``[since, until]``, averaged per bucket.

    The range is cut into ``max_points`` equal buckets; empty buckets produce no point. ``since``
    defaults to the first sample, ``until`` to now.
    """
    until = until or timezone.now()
    qs = MetricSample.objects.filter(kind=kind, at__lte=until)
    qs = qs.filter(task__isnull=True) if task_id is None else qs.filter(task_id=task_id)
    if since is None:
        since = qs.aggregate(first=Min("at"))["first"]
        if since is None:
            return Series(kind, task_id, None, until, 0.0, [])
    qs = qs.filter(at__gte=since)
    span = max((until - since).total_seconds(), 1e-6)
    width = span / max_points
    start = since.timestamp()
    # a sample exactly at ``until`` would open bucket ``max_points``: LEAST folds it into the last one
    raw = Cast(Floor((EpochSeconds(F("at")) - Value(start)) / Value(width)), IntegerField())
    bucket = Least(raw, Value(max_points - 1))
    rows = (
        qs.annotate(bucket=bucket)
        .values("bucket")
        .annotate(avg=Avg("value"), lo=Min("value"), hi=Max("value"), n=Count("id"))
        .order_by("bucket")
    )
    points = [
        Point(
            at=since + timedelta(seconds=r["bucket"] * width),
            value=r["avg"],
            min=r["lo"],
            max=r["hi"],
            count=r["n"],
        )
        for r in rows
    ]
    return Series(kind, task_id, since, until, width, points)
