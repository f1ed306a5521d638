"""Schedule ``metrics.apply_retention`` (thin metric samples past the raw window, drop them past the
retention) every 10 minutes with Celery beat."""

from __future__ import annotations

from typing import Any

from django.db import migrations
from controlplane.apps.common.beat import schedule_interval_task, unschedule_task

TASK = "metrics.apply_retention"


def schedule(apps: Any, schema_editor: Any) -> None:
    schedule_interval_task(
        apps,
        TASK,
        every_s=600,
        expire_s=600,
        description="Metric samples: one per minute per series past the raw window, none past the "
        "retention (metrics/tasks.py).",
    )


def unschedule(apps: Any, schema_editor: Any) -> None:
    unschedule_task(apps, TASK)


class Migration(migrations.Migration):
    dependencies = [
        ("metrics", "0005_metric_kinds_validation_loss_learning_rate_grad_norm"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(schedule, unschedule)]
