"""A transition's step deadlines follow the host: a task whose recent iterations are slow gets
``UNICRON_STEP_DEADLINE_ITERATIONS`` / ``UNICRON_RESUME_DEADLINE_ITERATIONS`` of them when that is longer
than the floors (on a CPU-starved demo host a fixed 60 s failed starts that would have completed), up to
``UNICRON_DEADLINE_MAX_FACTOR`` times the floors; a task never measured gets the floors."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone
from pytest_django.fixtures import SettingsWrapper

from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.planning.models import Transition
from controlplane.apps.planning.replan import replan
from controlplane.apps.training.models import TrainingTask
from tests.controlplane.factories import NodeFactory, TaskFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _deadlines(settings: SettingsWrapper) -> None:
    settings.UNICRON_STEP_DEADLINE_S = 60.0
    settings.UNICRON_RESUME_DEADLINE_S = 180.0
    settings.UNICRON_STEP_DEADLINE_ITERATIONS = 200.0
    settings.UNICRON_RESUME_DEADLINE_ITERATIONS = 600.0
    settings.UNICRON_DEADLINE_MAX_FACTOR = 5.0


def _measured(task: TrainingTask, *values: float) -> None:
    now = timezone.now()
    MetricSample.objects.bulk_create(
        MetricSample(task=task, kind="iteration_time", value=v, iteration=i, at=now - timedelta(seconds=i))
        for i, v in enumerate(values)
    )


def _allowed_s(task: TrainingTask) -> dict[str, float]:
    """step name -> seconds from the transition's creation to the step's deadline."""
    (t,) = replan("task_submitted").transitions
    t = Transition.objects.get(pk=t.pk)
    return {s.name: (s.deadline_at - t.created_at).total_seconds() for s in t.steps.all()}


def test_a_task_never_measured_gets_the_floors() -> None:
    NodeFactory(devices=2)
    task = TaskFactory(min_workers=2, max_workers=2)
    with transaction.atomic():
        allowed = _allowed_s(task)
    assert allowed["start"] == pytest.approx(60.0, abs=2.0)
    assert allowed["resume"] == pytest.approx(180.0, abs=2.0)


def test_slow_recent_iterations_stretch_the_deadlines() -> None:
    NodeFactory(devices=2)
    task = TaskFactory(min_workers=2, max_workers=2)
    _measured(task, 0.9, 0.9, 0.8, 1.0, 0.9)  # median 0.9 s: 3x the host the floors were set on
    with transaction.atomic():
        allowed = _allowed_s(task)
    assert allowed["start"] == pytest.approx(180.0, abs=2.0)
    assert allowed["resume"] == pytest.approx(540.0, abs=2.0)


def test_very_slow_iterations_stop_at_the_cap() -> None:
    NodeFactory(devices=2)
    task = TaskFactory(min_workers=2, max_workers=2)
    _measured(task, 30.0, 30.0, 30.0)
    with transaction.atomic():
        allowed = _allowed_s(task)
    assert allowed["start"] == pytest.approx(300.0, abs=2.0)
    assert allowed["resume"] == pytest.approx(900.0, abs=2.0)
