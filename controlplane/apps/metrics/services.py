"""Metric ingestion: bulk inserts, a live event per batch after commit; the cluster WAF timeline."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction

from controlplane.apps.common.broadcast import send_event_on_commit
from controlplane.apps.common.errors import InvalidInput
from controlplane.apps.metrics.choices import CLUSTER_KINDS, MetricKind
from controlplane.apps.metrics.models import MetricSample


@dataclass(frozen=True)
class Sample:
    kind: MetricKind
    value: float
    at: datetime
    task_id: int | None = None
    iteration: int | None = None


def check_record_samples(samples: list[Sample]) -> None:
    for s in samples:
        if (s.kind in CLUSTER_KINDS) != (s.task_id is None):
            raise InvalidInput(
                {"task": [f"{s.kind} samples are {'cluster' if s.kind in CLUSTER_KINDS else 'per task'}."]}
            )


@transaction.atomic
def do_record_samples(samples: Iterable[Sample]) -> int:
    batch = list(samples)
    check_record_samples(batch)
    MetricSample.objects.bulk_create(
        MetricSample(task_id=s.task_id, kind=s.kind, value=s.value, at=s.at, iteration=s.iteration)
        for s in batch
    )
    if batch:
        send_event_on_commit(
            "metrics.samples",
            {
                "samples": [
                    {"task": s.task_id, "kind": s.kind, "value": s.value, "at": s.at.isoformat()}
                    for s in batch
                ]
            },
        )
    return len(batch)


@dataclass(frozen=True)
class ClusterWafSample:
    at: datetime
    achieved: float
    """Σ w(t) x measured achieved FLOP/s of the running tasks."""
    optimum: float
    """The planner's best WAF with every registered, non-quarantined node healthy."""
    goodput: float | None = None
    """Share of scheduled task time in useful iterations over the sampler's window (None: no task)."""


def check_record_cluster_waf(sample: ClusterWafSample) -> None:
    errors: dict[str, list[str]] = {}
    for name in ("achieved", "optimum"):
        value = getattr(sample, name)
        if not math.isfinite(value) or value < 0:
            errors[name] = [f"{name} must be a finite number >= 0."]
    if sample.goodput is not None and not 0.0 <= sample.goodput <= 1.0:
        errors["goodput"] = ["goodput is a share between 0 and 1."]
    if errors:
        raise InvalidInput(errors)


@transaction.atomic
def do_record_cluster_waf(sample: ClusterWafSample) -> None:
    """One tick of the cluster WAF timeline: the achieved and optimum series (and goodput), then a
    ``waf.sample`` live event after commit."""
    check_record_cluster_waf(sample)
    rows = [
        MetricSample(kind=MetricKind.CLUSTER_WAF, value=sample.achieved, at=sample.at),
        MetricSample(kind=MetricKind.OPTIMAL_WAF, value=sample.optimum, at=sample.at),
    ]
    if sample.goodput is not None:
        rows.append(MetricSample(kind=MetricKind.GOODPUT, value=sample.goodput, at=sample.at))
    MetricSample.objects.bulk_create(rows)
    send_event_on_commit(
        "waf.sample",
        {
            "at": sample.at.isoformat(),
            "achieved": sample.achieved,
            "optimum": sample.optimum,
            "goodput": sample.goodput,
        },
    )


@dataclass(frozen=True)
class Retention:
    """What :func:`do_apply_retention` removed: rows thinned to one per minute, rows past retention."""

    thinned: int
    expired: int


def do_apply_retention(now: datetime, raw_s: float, keep_s: float, window_s: float) -> Retention:
    """Bound the samples: rows younger than ``raw_s`` stay as reported (one a second per task and kind);
    older ones are thinned to the last of each minute per series, over the ``window_s`` before that
    boundary (the task runs more often than that, so every row is thinned once); rows older than ``keep_s``
    go. Each is one DELETE, in a transaction of its own."""
    table = MetricSample._meta.db_table
    raw_before = now - timedelta(seconds=raw_s)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"""
            DELETE FROM {table} AS s
             USING (
                SELECT id, row_number() OVER (
                    PARTITION BY task_id, kind, date_trunc('minute', at) ORDER BY at DESC, id DESC
                ) AS n
                  FROM {table}
                 WHERE at >= %s AND at < %s
             ) AS ranked
             WHERE s.id = ranked.id AND ranked.n > 1
            """,
            [raw_before - timedelta(seconds=window_s), raw_before],
        )
        thinned = cursor.rowcount
    with transaction.atomic():
        expired, _ = MetricSample.objects.filter(at__lt=now - timedelta(seconds=keep_s)).delete()
    return Retention(thinned, expired)
