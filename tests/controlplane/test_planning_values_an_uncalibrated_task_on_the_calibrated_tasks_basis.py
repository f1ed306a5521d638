"""A task never calibrated is planned on the same throughput basis as the tasks calibrated on its device kind:
the model slowed down by their median measured / modelled ratio, not the nominal model. On the nominal model
a weight-1 newcomer outbid two weight-5 tasks measured 100x slower than modelled, and the plan suspended one
of them to make room for it."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.planning.calibration import recalibrate_tasks
from controlplane.apps.planning.replan import replan
from controlplane.apps.planning.selectors import build_planning_problem, load_cluster
from controlplane.apps.training.choices import TaskState
from controlplane.apps.training.models import Allocation, TrainingTask
from tests.controlplane.factories import NodeFactory, TaskFactory

SLOWDOWN = 100.0


def test_a_new_weight_one_task_does_not_displace_calibrated_high_weight_tasks(db: None) -> None:
    NodeFactory(devices=8)
    heavy = [TaskFactory(weight=5.0, min_workers=4, max_workers=4) for _ in range(2)]
    with transaction.atomic():
        replan("task_submitted")
    assert all(Allocation.objects.filter(task=t, active=True).count() == 4 for t in heavy)
    TrainingTask.objects.filter(pk__in=[t.pk for t in heavy]).update(state=TaskState.RUNNING)
    problem = build_planning_problem()
    now = timezone.now() + timedelta(seconds=1)
    for t in heavy:
        modelled = next(p for p in problem.task(str(t.pk)).table.points if p.workers == 4).iteration_s
        assert modelled is not None
        MetricSample.objects.bulk_create(
            MetricSample(task=t, kind="iteration_time", value=SLOWDOWN * modelled, at=now, iteration=i)
            for i in range(5)
        )
    assert recalibrate_tasks(load_cluster()) == 2

    light = TaskFactory(weight=1.0, min_workers=4, max_workers=8)
    prior_view = load_cluster()
    assert prior_view.prior.compute < 0.5 / (SLOWDOWN / 2)  # the defaults slowed by the measured ratio

    with transaction.atomic():
        decision = replan("task_submitted")
    new_workers = {d["task"]: d["new_workers"] for d in decision.plan.decisions}
    assert new_workers[heavy[0].pk] == 4
    assert new_workers[heavy[1].pk] == 4
    assert new_workers[light.pk] == 0
    light.refresh_from_db()
    assert light.state == TaskState.PENDING
    assert not Allocation.objects.filter(task=light, active=True).exists()
