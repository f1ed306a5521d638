"""A straggler (sev1) is isolated only when the plan without its device yields more weighted FLOP/s than
the task running slowed down; otherwise the device is kept, the event resolved and an operator told."""

from __future__ import annotations

import uuid

from django.db import transaction
from django.utils import timezone

from controlplane.apps.fleet.models import Device
from controlplane.apps.incidents.models import Alert, FailureEvent
from controlplane.apps.planning.handling import handle_failure
from controlplane.apps.planning.models import Transition
from controlplane.apps.planning.replan import replan
from controlplane.apps.training.models import Allocation, TrainingTask
from tests.controlplane.factories import NodeFactory, TaskFactory


def straggler(task: TrainingTask, ratio: float) -> FailureEvent:
    alloc = Allocation.objects.select_related("device__node").get(task=task, active=True, rank=0)
    now = timezone.now()
    return FailureEvent.objects.create(
        report_id=uuid.uuid4(),
        detector="statistical_monitoring",
        kind="straggler",
        severity="sev1",
        action="isolate_and_replan",
        occurred_at=now,
        detected_at=now,
        task=task,
        task_epoch=task.epoch,
        node=alloc.device.node,
        device=alloc.device,
        evidence={"report": {"rank": 0, "event": {"kind": "straggler", "ratio": ratio}}},
    )


def start(nodes: int) -> TrainingTask:
    for _ in range(nodes):
        NodeFactory(devices=8)
    task = TaskFactory(min_workers=8, max_workers=8)
    with transaction.atomic():
        replan("task_submitted")
    Transition.objects.filter(task=task).update(state="completed")
    TrainingTask.objects.filter(pk=task.pk).update(state="running")
    task.refresh_from_db()
    return task


def test_kept_when_the_task_cannot_run_without_it(db: None) -> None:
    task = start(nodes=1)
    ev = straggler(task, ratio=1.6)
    assert handle_failure(ev.pk).note.startswith("straggler tolerated")
    ev.refresh_from_db()
    assert ev.resolved_at is not None
    assert Device.objects.get(pk=ev.device_id).state == "healthy"
    assert Alert.objects.filter(source_event=ev, message__contains="kept").exists()
    assert not Transition.objects.filter(task=task, epoch=task.epoch + 1).exists()


def test_isolated_when_spare_devices_make_it_pay(db: None) -> None:
    task = start(nodes=2)
    ev = straggler(task, ratio=1.6)
    assert handle_failure(ev.pk).note.startswith("re-planned")
    assert Device.objects.get(pk=ev.device_id).state == "isolated"
    assert not Allocation.objects.filter(task=task, active=True, device_id=ev.device_id).exists()
    assert Transition.objects.filter(task=task, epoch=task.epoch + 1, failure_event=ev).exists()
