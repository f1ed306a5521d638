"""Schedule the re-enqueueing of failure handling whose worker died (``incidents.reclaim_failure_handling``)
every second with Celery beat."""

from __future__ import annotations

from typing import Any

from django.db import migrations
from controlplane.apps.common.beat import schedule_interval_task, unschedule_task

TASK = "incidents.reclaim_failure_handling"


def schedule(apps: Any, schema_editor: Any) -> None:
    schedule_interval_task(
        apps,
        TASK,
        every_s=1,
        expire_s=2,
        description="Crash-safe failure handling: an unhandled event whose handling worker died is "
        "re-enqueued (docs/ARCHITECTURE.md §7.2).",
    )


def unschedule(apps: Any, schema_editor: Any) -> None:
    unschedule_task(apps, TASK)


class Migration(migrations.Migration):
    dependencies = [
        ("incidents", "0004_failureevent_handling_claimed_at"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(schedule, unschedule)]
