"""Metric ingestion: bulk inserts, a live event per batch after commit."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction

from controlplane.apps.common.errors import InvalidInput
from controlplane.apps.metrics.choices import CLUSTER_KINDS, MetricKind
from controlplane.apps.metrics.models import MetricSample
from controlplane.live.broadcast import send_event_on_commit


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
