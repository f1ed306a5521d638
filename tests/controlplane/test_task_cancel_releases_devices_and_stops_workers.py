from __future__ import annotations

from rest_framework.test import APIClient

from controlplane.apps.fleet.models import AgentCommand, Node
from controlplane.apps.fleet.outbox import command_message
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.apps.training.services import Placement, do_allocate_devices
from tests.controlplane.factories import TaskFactory


def test_cancel_releases_devices_bumps_epoch_and_queues_stop_commands(
    cluster: list[Node], operator_client: APIClient
) -> None:
    task = TaskFactory(state="running", epoch=3)
    devices = [*cluster[0].devices.all()[:2], *cluster[1].devices.all()[:2]]
    do_allocate_devices(task, [Placement(device_id=d.pk, rank=r) for r, d in enumerate(devices)])

    response = operator_client.post(f"/api/v1/tasks/{task.pk}/cancel/")

    assert response.status_code == 200
    task.refresh_from_db()
    assert task.state == "cancelled"
    assert task.epoch == 4
    assert task.finished_at is not None
    assert not Allocation.objects.filter(task=task, active=True).exists()
    commands = AgentCommand.objects.filter(task=task, type="stop_workers")
    assert sorted(c.node_id for c in commands) == sorted(n.pk for n in cluster)
    assert {c.task_epoch for c in commands} == {4}
    # the task is over: the agents drop its in-memory snapshots with its workers
    assert {command_message(c).task_ended for c in commands} == {True}  # type: ignore[union-attr]


def test_a_finished_task_cannot_be_cancelled(db: None, operator_client: APIClient) -> None:
    task = TaskFactory(state="completed")

    response = operator_client.post(f"/api/v1/tasks/{task.pk}/cancel/")

    assert response.status_code == 409
    assert TrainingTask.objects.get(pk=task.pk).state == "completed"
