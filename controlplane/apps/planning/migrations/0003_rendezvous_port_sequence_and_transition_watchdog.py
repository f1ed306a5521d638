"""A sequence for rendezvous ports (a fresh port per task epoch, never reused while the sequence runs
its span) and the transition watchdog (``planning.check_transitions``) every second with Celery beat."""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.utils import timezone

TASK = "planning.check_transitions"


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
            "expire_seconds": 2,
            "description": "Transition watchdog: overdue steps fail and escalate; stuck work resumes "
            "(docs/ARCHITECTURE.md §2, §8).",
        },
    )
    periodic_tasks.objects.update_or_create(ident=1, defaults={"last_update": timezone.now()})


def unschedule(apps: Any, schema_editor: Any) -> None:
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=TASK).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("planning", "0002_plan_explanation_plan_lookup_and_more"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [
        migrations.RunSQL(
            "CREATE SEQUENCE IF NOT EXISTS planning_rendezvous_port_seq",
            "DROP SEQUENCE IF EXISTS planning_rendezvous_port_seq",
        ),
        migrations.RunPython(schedule, unschedule),
    ]
