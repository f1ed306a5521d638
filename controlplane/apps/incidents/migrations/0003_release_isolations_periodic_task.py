"""Schedule the return of isolated devices and nodes to service on probation
(``incidents.release_isolations``) every 30 seconds with Celery beat."""

from __future__ import annotations

from typing import Any

from django.db import migrations
from controlplane.apps.common.beat import schedule_interval_task, unschedule_task

TASK = "incidents.release_isolations"


def schedule(apps: Any, schema_editor: Any) -> None:
    schedule_interval_task(
        apps,
        TASK,
        every_s=30,
        expire_s=30,
        description="Isolation is not forever: isolated devices and nodes with no new cause-evidence "
        "return to service on probation (docs/ARCHITECTURE.md §7.2).",
    )


def unschedule(apps: Any, schema_editor: Any) -> None:
    unschedule_task(apps, TASK)


class Migration(migrations.Migration):
    dependencies = [
        ("incidents", "0002_failureevent_handled_at_failureevent_handled_by_and_more"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(schedule, unschedule)]
