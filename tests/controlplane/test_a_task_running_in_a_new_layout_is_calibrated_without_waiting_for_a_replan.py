"""A task launched by the only plan of a quiet cluster must not keep its modelled throughput (and the
healthy-cluster optimum with it) until some later re-plan: the beat's transition check calibrates a
running task in a layout it has no measurement of once it has a few iteration times there, and the
summary says how many of the optimum's tasks rest on measured throughput."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.planning.calibration import CALIBRATE_AFTER_SAMPLES, calibrate_new_layouts
from controlplane.apps.planning.replan import replan
from controlplane.apps.planning.tasks import check_transitions_task
from controlplane.apps.training.models import TrainingTask
from tests.controlplane.factories import NodeFactory, TaskFactory


def _samples(task: TrainingTask, n: int, value: float = 0.5) -> None:
    now = timezone.now() + timedelta(seconds=1)
    MetricSample.objects.bulk_create(
        MetricSample(task=task, kind="iteration_time", value=value, at=now, iteration=i) for i in range(n)
    )


def test_the_transition_check_calibrates_a_new_layout_once_it_has_samples(
    db: None, viewer_client: APIClient
) -> None:
    NodeFactory(devices=8)
    task = TaskFactory(min_workers=8, max_workers=8)
    TaskFactory(name="waiting", min_workers=8, max_workers=8)  # pending, never ran
    with transaction.atomic():
        replan("task_submitted")
    TrainingTask.objects.filter(pk=task.pk).update(state="running")
    summary = viewer_client.get("/api/v1/summary/").json()
    assert (summary["optimum_tasks"], summary["optimum_tasks_measured"]) == (2, 0)

    _samples(task, CALIBRATE_AFTER_SAMPLES - 1)
    assert calibrate_new_layouts() == 0  # too few samples in the layout yet
    _samples(task, 1)
    assert check_transitions_task()["calibrated"] == 1
    task.refresh_from_db()
    assert task.throughput_table["measurements"][0]["iteration_s"] == 0.5
    assert calibrate_new_layouts() == 0  # measured in this layout: nothing to do until it changes

    summary = viewer_client.get("/api/v1/summary/").json()
    assert (summary["optimum_tasks"], summary["optimum_tasks_measured"]) == (2, 1)
