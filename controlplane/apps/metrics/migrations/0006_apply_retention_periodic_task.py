"""Schedule ``metrics.apply_retention`` (thin metric samples past the raw window, drop them past the
retention) every 10 minutes with Celery beat."""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.utils import timezone

TASK = "metrics.apply_retention"


def schedule(apps: Any, schema_editor: Any) -> None:
    interval_schedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    periodic_task = apps.get_model("django_celery_beat", "PeriodicTask")
    periodic_tasks = apps.get_model("django_celery_beat", "PeriodicTasks")
    every, _ = interval_schedule.objects.get_or_create(every=600, period="seconds")
    periodic_task.objects.update_or_create(
        name=TASK,
        defaults={
            "task": TASK,
            "interval": every,
            "enabled": True,
            "expire_seconds": 600,
            "description": "Metric samples: one per minute per series past the raw window, none past the "
            "retention (metrics/tasks.py).",
        },
    )
    periodic_tasks.objects.update_or_create(ident=1, defaults={"last_update": timezone.now()})


def unschedule(apps: Any, schema_editor: Any) -> None:
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=TASK).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("metrics", "0005_metric_kinds_validation_loss_learning_rate_grad_norm"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(schedule, unschedule)]
