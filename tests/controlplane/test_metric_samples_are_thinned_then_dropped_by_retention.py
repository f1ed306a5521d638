"""Metric samples are kept as reported for the raw window, then one per minute per series (the last of
each minute), and dropped past the retention: the table is bounded whatever the fleet reports."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.apps.metrics.choices import MetricKind
from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.metrics.services import Sample, do_apply_retention, do_record_samples
from tests.controlplane.factories import TaskFactory

RAW_S = 3600.0
KEEP_S = 86400.0


@pytest.mark.django_db
def test_old_samples_are_thinned_to_the_last_of_each_minute_and_ancient_ones_dropped() -> None:
    now = timezone.now().replace(second=30, microsecond=0)
    task, other = TaskFactory(), TaskFactory()
    old_minute = (now - timedelta(seconds=RAW_S + 600)).replace(second=0)
    samples = []
    for t in (task, other):
        for kind in (MetricKind.ITERATION_TIME, MetricKind.TRAINING_LOSS):
            # three minutes of one sample a second, before the raw window
            samples += [
                Sample(kind, float(i), old_minute + timedelta(seconds=i), t.pk, i) for i in range(180)
            ]
            # the last five minutes, as reported
            samples += [Sample(kind, 1.0, now - timedelta(seconds=i), t.pk, i) for i in range(300)]
            # two days ago
            samples += [Sample(kind, 2.0, now - timedelta(days=2, seconds=i), t.pk, i) for i in range(10)]
    do_record_samples(samples)

    done = do_apply_retention(now, raw_s=RAW_S, keep_s=KEEP_S, window_s=3 * 3600)

    assert done.expired == 2 * 2 * 10
    assert done.thinned == 2 * 2 * (180 - 3)
    kept_old = MetricSample.objects.filter(
        task=task, kind=MetricKind.ITERATION_TIME, at__lt=now - timedelta(hours=1)
    )
    assert sorted(kept_old.values_list("value", flat=True)) == [59.0, 119.0, 179.0]  # the last of each minute
    recent = MetricSample.objects.filter(
        task=task, kind=MetricKind.TRAINING_LOSS, at__gt=now - timedelta(hours=1)
    )
    assert recent.count() == 300
    again = do_apply_retention(now, raw_s=RAW_S, keep_s=KEEP_S, window_s=3 * 3600)
    assert (again.thinned, again.expired) == (0, 0)  # idempotent
