"""Schedule the cluster WAF sampler (``metrics.sample_cluster_waf``) every 5 seconds with Celery beat."""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.utils import timezone

TASK = "metrics.sample_cluster_waf"
EVERY_S = 5  # metrics.tasks.SAMPLE_INTERVAL_S (a migration keeps its own copy of the value)


def schedule(apps: Any, schema_editor: Any) -> None:
    interval_schedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    periodic_task = apps.get_model("django_celery_beat", "PeriodicTask")
    periodic_tasks = apps.get_model("django_celery_beat", "PeriodicTasks")
    every, _ = interval_schedule.objects.get_or_create(every=EVERY_S, period="seconds")
    periodic_task.objects.update_or_create(
        name=TASK,
        defaults={
            "task": TASK,
            "interval": every,
            "enabled": True,
            # a tick not run within its period is useless: the next one is already queued
            "expire_seconds": EVERY_S,
            "description": "Cluster WAF timeline: achieved WAF, healthy-cluster optimum and goodput samples.",
        },
    )
    # tell a running beat (DatabaseScheduler) that the schedule changed
    periodic_tasks.objects.update_or_create(ident=1, defaults={"last_update": timezone.now()})


def unschedule(apps: Any, schema_editor: Any) -> None:
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=TASK).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("metrics", "0002_metric_kind_goodput"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(schedule, unschedule)]
