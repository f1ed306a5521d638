from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from channels.db import database_sync_to_async

from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.incidents.models import Alert, FailureEvent
from controlplane.apps.training.models import Allocation, TrainingTask
from tests.controlplane.factories import TaskFactory
from tests.e2e.conftest import Connect, Registered

pytestmark = pytest.mark.django_db(transaction=True)


def cuda_exception(task_pk: int, report_id: str, device: int = 0) -> dict[str, Any]:
    now = datetime.now(UTC).isoformat()
    return {
        "type": "worker_report",
        "report_id": report_id,
        "task_id": str(task_pk),
        "epoch": 0,
        "rank": device,
        "device": device,
        "detector": "exception_propagation",
        "occurred_at": now,
        "detected_at": now,
        "event": {
            "kind": "exception",
            "exc_type": "RuntimeError",
            "message": "CUDA error: an illegal memory access was encountered",
            "traceback": "Traceback (most recent call last): ...",
            "iteration": 12,
        },
    }


@database_sync_to_async
def held_by(node: Node, task: TrainingTask, ranks: list[int]) -> None:
    """``node`` runs ``ranks`` of ``task`` at epoch 0 (released: the task is not running anywhere)."""
    for rank in ranks:
        device = Device.objects.get(node=node, index=rank)
        Allocation.objects.create(task=task, device=device, rank=rank, epoch=0, active=False)


@database_sync_to_async
def events() -> list[FailureEvent]:
    return list(FailureEvent.objects.select_related("device").order_by("detected_at", "id"))


async def test_a_resent_exception_report_is_one_classified_failure_event(
    registered: Registered, connect: Connect
) -> None:
    task: TrainingTask = await database_sync_to_async(TaskFactory)()
    agent = await connect(registered.token, registered.name)
    await agent.hello(devices=2)
    await agent.settle()
    await held_by(registered.node, task, ranks=[0, 1])  # the node may speak only for its ranks
    report_id = str(uuid.uuid4())

    await agent.send(cuda_exception(task.pk, report_id))
    await agent.send(cuda_exception(task.pk, report_id))  # re-sent after a reconnect: same id
    await agent.settle()

    [event] = await events()
    assert str(event.report_id) == report_id
    assert (event.detector, event.kind, event.severity, event.action) == (
        "exception_propagation",
        "cuda_error",
        "sev2",
        "restart_processes",
    )
    assert event.task_id == task.pk
    assert event.device is not None
    assert event.device.index == 0
    assert event.evidence["report"]["event"]["exc_type"] == "RuntimeError"
    assert event.evidence["classification"]["rule"] == "cuda-error"
    device = await database_sync_to_async(Device.objects.get)(pk=event.device.pk)
    assert device.error_count == 1  # counted once, not per delivery


async def test_a_second_sev2_on_the_same_device_escalates_to_sev1_with_an_alert(
    registered: Registered, connect: Connect
) -> None:
    task: TrainingTask = await database_sync_to_async(TaskFactory)()
    agent = await connect(registered.token, registered.name)
    await agent.hello(devices=2)
    await agent.settle()
    await held_by(registered.node, task, ranks=[0, 1])

    await agent.send(cuda_exception(task.pk, str(uuid.uuid4())))
    await agent.send(cuda_exception(task.pk, str(uuid.uuid4())))
    await agent.settle()

    first, second = await events()
    assert (first.severity, second.severity) == ("sev2", "sev1")
    assert second.evidence["classification"]["escalated_from"] == "sev2"
    alerts = await database_sync_to_async(
        lambda: list(Alert.objects.values_list("source_event_id", flat=True))
    )()
    assert alerts == [second.pk]


async def test_a_report_id_that_is_not_a_uuid_is_refused(registered: Registered, connect: Connect) -> None:
    agent = await connect(registered.token, registered.name)
    await agent.hello()

    await agent.send(cuda_exception(1, "not-a-uuid"))
    reply = (await agent.receive())["message"]

    assert (reply["code"], "report_id" in reply["detail"]) == ("invalid", True)
    assert await events() == []
