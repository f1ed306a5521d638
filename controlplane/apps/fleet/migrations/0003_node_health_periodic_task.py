"""Schedule the node health watchdog (``fleet.check_node_health``) every second with Celery beat."""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.utils import timezone

TASK = "fleet.check_node_health"


def schedule(apps: Any, schema_editor: Any) -> None:
    interval_schedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    periodic_task = apps.get_model("django_celery_beat", "PeriodicTask")
    periodic_tasks = apps.get_model("django_celery_beat", "PeriodicTasks")
    every_second, _ = interval_schedule.objects.get_or_create(every=1, period="seconds")
    periodic_task.objects.update_or_create(
        name=TASK,
        defaults={
            "task": TASK,
            "interval": every_second,
            "enabled": True,
            # a tick not picked up within 2 s is useless: the next one is already queued
            "expire_seconds": 2,
            "description": "Node health watchdog: silent nodes become suspect, then lost (docs/ARCHITECTURE.md §7.1).",
        },
    )
    # tell a running beat (DatabaseScheduler) that the schedule changed
    periodic_tasks.objects.update_or_create(ident=1, defaults={"last_update": timezone.now()})


def unschedule(apps: Any, schema_editor: Any) -> None:
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=TASK).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0002_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(schedule, unschedule)]
