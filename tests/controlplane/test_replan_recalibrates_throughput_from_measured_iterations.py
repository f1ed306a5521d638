"""After a re-plan, a running task's throughput model is recalibrated with its measured iteration times
(metric samples since its epoch began): the fitted efficiency and the resulting table are stored and
the next planning problem uses them."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.planning.calibration import recalibrate_tasks
from controlplane.apps.planning.replan import replan
from controlplane.apps.planning.selectors import build_planning_problem, load_cluster
from controlplane.apps.training.models import TrainingTask
from tests.controlplane.factories import NodeFactory, TaskFactory


def test_measured_iterations_recalibrate_the_table(db: None) -> None:
    NodeFactory(devices=8)
    task = TaskFactory(min_workers=8, max_workers=8)
    with transaction.atomic():
        replan("task_submitted")
    TrainingTask.objects.filter(pk=task.pk).update(state="running")
    before = build_planning_problem().task(str(task.pk)).table.throughput(8)
    now = timezone.now() + timedelta(seconds=1)
    measured_s = 0.5
    MetricSample.objects.bulk_create(
        MetricSample(task=task, kind="iteration_time", value=measured_s, at=now, iteration=i)
        for i in range(5)
    )
    assert recalibrate_tasks(load_cluster()) == 1
    task.refresh_from_db()
    stored = task.throughput_table
    assert stored["device_kind"] == "h100-80g"
    assert stored["measurements"][0]["iteration_s"] == measured_s
    assert stored["rms_relative_error_after"] < 1e-6  # one measurement: fitted exactly
    assert any(p["workers"] == 8 for p in stored["points"])
    after = build_planning_problem().task(str(task.pk)).table.throughput(8)
    assert after != before
