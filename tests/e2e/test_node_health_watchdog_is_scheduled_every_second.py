from __future__ import annotations

import pytest
from django_celery_beat.models import PeriodicTask

from controlplane.config.celery import app


@pytest.mark.django_db
def test_beat_runs_the_node_health_watchdog_every_second() -> None:
    task = PeriodicTask.objects.select_related("interval").get(name="fleet.check_node_health")
    app.loader.import_default_modules()

    assert task.enabled
    assert task.interval is not None
    assert (task.interval.every, task.interval.period) == (1, "seconds")
    assert task.task in app.tasks
