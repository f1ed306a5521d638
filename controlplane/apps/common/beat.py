"""Celery beat schedules written by data migrations: one interval task, created or updated, and removed on
rollback. Migrations pass their historical ``apps``."""

from __future__ import annotations

from typing import Any

from django.utils import timezone


def schedule_interval_task(apps: Any, task: str, every_s: int, expire_s: int, description: str) -> None:
    interval_schedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    periodic_task = apps.get_model("django_celery_beat", "PeriodicTask")
    periodic_tasks = apps.get_model("django_celery_beat", "PeriodicTasks")
    every, _ = interval_schedule.objects.get_or_create(every=every_s, period="seconds")
    periodic_task.objects.update_or_create(
        name=task,
        defaults={
            "task": task,
            "interval": every,
            "enabled": True,
            "expire_seconds": expire_s,
            "description": description,
        },
    )
    periodic_tasks.objects.update_or_create(ident=1, defaults={"last_update": timezone.now()})


def unschedule_task(apps: Any, task: str) -> None:
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=task).delete()
