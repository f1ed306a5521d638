"""Schedule the return of isolated devices and nodes to service on probation
(``incidents.release_isolations``) every 30 seconds with Celery beat."""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.utils import timezone

TASK = "incidents.release_isolations"


def schedule(apps: Any, schema_editor: Any) -> None:
    interval_schedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    periodic_task = apps.get_model("django_celery_beat", "PeriodicTask")
    periodic_tasks = apps.get_model("django_celery_beat", "PeriodicTasks")
    every, _ = interval_schedule.objects.get_or_create(every=30, period="seconds")
    periodic_task.objects.update_or_create(
        name=TASK,
        defaults={
            "task": TASK,
            "interval": every,
            "enabled": True,
            "expire_seconds": 30,
            "description": "Isolation is not forever: isolated devices and nodes with no new cause-evidence "
            "return to service on probation (docs/ARCHITECTURE.md §7.2).",
        },
    )
    periodic_tasks.objects.update_or_create(ident=1, defaults={"last_update": timezone.now()})


def unschedule(apps: Any, schema_editor: Any) -> None:
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=TASK).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("incidents", "0002_failureevent_handled_at_failureevent_handled_by_and_more"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(schedule, unschedule)]
