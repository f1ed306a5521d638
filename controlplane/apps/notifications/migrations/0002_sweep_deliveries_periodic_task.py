"""Schedule ``notifications.sweep_deliveries`` every 30 seconds with Celery beat: it releases claims of
workers that stopped mid-attempt and re-enqueues deliveries whose message was lost."""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.utils import timezone

TASK = "notifications.sweep_deliveries"
EVERY_S = 30


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
            "expire_seconds": EVERY_S,
            "description": "Alert deliveries: release stale claims, re-enqueue deliveries whose message was lost.",
        },
    )
    periodic_tasks.objects.update_or_create(ident=1, defaults={"last_update": timezone.now()})


def unschedule(apps: Any, schema_editor: Any) -> None:
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=TASK).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(schedule, unschedule)]
