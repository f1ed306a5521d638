"""Metric ingestion: bulk inserts, a live event per batch after commit; the cluster WAF timeline."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction

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
