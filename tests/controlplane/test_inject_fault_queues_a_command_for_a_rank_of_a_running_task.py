"""POST /api/v1/nodes/{id}/inject-fault/: a validated drill becomes an audited inject_fault command in
the node's outbox (202 with its id); anything it cannot reach is a 4xx with field errors that changes
nothing."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from controlplane.apps.accounts.models import AuditEntry
from controlplane.apps.fleet.models import AgentCommand, Device, Node
from controlplane.apps.fleet.outbox import command_message
from controlplane.apps.training.models import Allocation, TrainingTask
from tests.controlplane.factories import NodeFactory, TaskFactory


def _running_task(nodes: list[Node], ranks_per_node: int) -> TrainingTask:
    task = TaskFactory(state="running", epoch=3)
    rank = 0
    for node in nodes:
        for device in Device.objects.filter(node=node).order_by("index")[:ranks_per_node]:
            Allocation.objects.create(task=task, device=device, rank=rank, dp_rank=rank, epoch=3)
            rank += 1
    return task


def _inject(client: APIClient, node: Node, body: dict[str, Any]) -> Any:
    return client.post(f"/api/v1/nodes/{node.pk}/inject-fault/", body, format="json")


def test_a_crash_on_a_rank_of_a_running_task_is_queued_fenced_and_audited(
    db: None, operator_client: APIClient
) -> None:
    a, b = NodeFactory(devices=2), NodeFactory(devices=2)
    task = _running_task([a, b], 2)  # ranks 0, 1 on a; 2, 3 on b

    response = _inject(operator_client, b, {"fault": "crash", "task": task.pk, "rank": 3})

    assert response.status_code == 202, response.json()
    command = AgentCommand.objects.get()
    assert str(command.command_id) == response.json()["command_id"]
    assert (command.node_id, command.type, command.state) == (b.pk, "inject_fault", "pending")
    assert (command.task_id, command.task_epoch) == (task.pk, 3)
    wire = command_message(command)  # what the agent receives
    assert wire.model_dump(mode="json")["fault"]["kind"] == "crash"
    assert wire.model_dump(mode="json")["fault"]["rank"] == 3
    assert (wire.task_id, wire.epoch) == (str(task.pk), 3)
    audit = AuditEntry.objects.get(verb="inject_fault")
    assert audit.object_id == str(b.pk)
    assert audit.after["command_id"] == str(command.command_id)
    assert audit.after["ranks"] == [3]


def test_without_a_rank_the_fault_reaches_every_rank_of_the_task_on_that_node(
    db: None, operator_client: APIClient
) -> None:
    a, b = NodeFactory(devices=2), NodeFactory(devices=2)
    task = _running_task([a, b], 2)

    response = _inject(operator_client, a, {"fault": "straggler", "task": task.pk})

    assert response.status_code == 202
    fault = AgentCommand.objects.get().payload["fault"]
    assert fault["rank"] is None
    assert fault["slowdown"] == 3.0
    assert AuditEntry.objects.get(verb="inject_fault").after["ranks"] == [0, 1]


def test_node_loss_needs_no_task(db: None, operator_client: APIClient) -> None:
    node = NodeFactory(devices=2)

    response = _inject(operator_client, node, {"fault": "node_loss"})

    assert response.status_code == 202
    command = AgentCommand.objects.get()
    assert command.task_id is None
    assert command_message(command).model_dump(mode="json")["fault"]["kind"] == "node_loss"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"fault": "meteor", "task": "TASK"}, "fault"),
        ({"fault": "crash"}, "task"),
        ({"fault": "crash", "task": "OTHER"}, "task"),  # runs, but not on this node
        ({"fault": "crash", "task": "TASK", "rank": 2}, "rank"),  # a rank on the other node
        ({"fault": "hang", "task": "PENDING"}, "task"),  # not running
        ({"fault": "node_loss", "task": "TASK"}, "task"),
        ({"fault": "exception", "task": "TASK", "slowdown": 2.0}, "slowdown"),
        ({"fault": "straggler", "task": "TASK", "slowdown": 0.5}, "slowdown"),
        ({"fault": "crash", "task": "TASK", "colour": "red"}, "colour"),
    ],
)
def test_a_drill_that_cannot_reach_its_target_is_a_field_error(
    db: None, operator_client: APIClient, body: dict[str, Any], field: str
) -> None:
    a, b = NodeFactory(devices=2), NodeFactory(devices=2)
    task = _running_task([a, b], 2)
    other = _running_task([b], 0)
    Allocation.objects.create(task=other, device=Device.objects.get(node=b, index=0), rank=0, active=False)
    pending = TaskFactory(state="pending")
    ids = {"TASK": task.pk, "OTHER": other.pk, "PENDING": pending.pk}
    body = {k: ids.get(v, v) if isinstance(v, str) and k == "task" else v for k, v in body.items()}

    response = _inject(operator_client, a, body)

    assert response.status_code == 400, response.json()
    assert field in response.json(), response.json()
    assert not AgentCommand.objects.exists()
    assert not AuditEntry.objects.filter(verb="inject_fault").exists()


def test_a_lost_node_cannot_take_a_drill(db: None, operator_client: APIClient) -> None:
    node = NodeFactory(devices=1, state="lost")

    response = _inject(operator_client, node, {"fault": "node_loss"})

    assert response.status_code == 409
    assert not AgentCommand.objects.exists()


def test_a_viewer_cannot_inject_faults(db: None, viewer_client: APIClient) -> None:
    node = NodeFactory(devices=1)

    response = _inject(viewer_client, node, {"fault": "node_loss"})

    assert response.status_code == 403
    assert not AgentCommand.objects.exists()
