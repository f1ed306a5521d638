"""Schedule the re-enqueueing of failure handling whose worker died (``incidents.reclaim_failure_handling``)
every second with Celery beat."""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.utils import timezone

TASK = "incidents.reclaim_failure_handling"


def schedule(apps: Any, schema_editor: Any) -> None:
    interval_schedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    periodic_task = apps.get_model("django_celery_beat", "PeriodicTask")
    periodic_tasks = apps.get_model("django_celery_beat", "PeriodicTasks")
    every, _ = interval_schedule.objects.get_or_create(every=1, period="seconds")
    periodic_task.objects.update_or_create(
        name=TASK,
        defaults={
            "task": TASK,
            "interval": every,
            "enabled": True,
            "expire_seconds": 2,
            "description": "Crash-safe failure handling: an unhandled event whose handling worker died is "
            "re-enqueued (docs/ARCHITECTURE.md §7.2).",
        },
    )
    periodic_tasks.objects.update_or_create(ident=1, defaults={"last_update": timezone.now()})


def unschedule(apps: Any, schema_editor: Any) -> None:
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=TASK).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("incidents", "0004_failureevent_handling_claimed_at"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(schedule, unschedule)]
