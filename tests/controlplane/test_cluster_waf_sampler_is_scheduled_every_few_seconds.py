"""The WAF sampler is on Celery beat's database schedule (data migration), every few seconds."""

from __future__ import annotations

from django_celery_beat.models import PeriodicTask

from controlplane.apps.metrics.tasks import SAMPLE_INTERVAL_S, sample_cluster_waf


def test_the_migration_schedules_the_sampler(db: None) -> None:
    task = PeriodicTask.objects.get(name="metrics.sample_cluster_waf")

    assert task.task == sample_cluster_waf.name == "metrics.sample_cluster_waf"
    assert task.enabled
    assert task.interval is not None
    assert (task.interval.every, task.interval.period) == (SAMPLE_INTERVAL_S, "seconds")
    assert SAMPLE_INTERVAL_S <= 10
