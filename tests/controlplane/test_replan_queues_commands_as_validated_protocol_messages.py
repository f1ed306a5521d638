"""The commands a re-plan queues are built as protocol messages, so a payload the agents would refuse fails
when it is queued, not when it is delivered: every row's payload is exactly its message's fields (less the
ones the row holds), and the outbox rebuilds the same message from it."""

from __future__ import annotations

import uuid

import pytest
from django.db import transaction
from pydantic import ValidationError

from controlplane.apps.fleet.models import AgentCommand, Node
from controlplane.apps.fleet.outbox import command_message
from controlplane.apps.fleet.services import do_enqueue_protocol_command
from controlplane.apps.planning.replan import replan
from controlplane.apps.training.models import TrainingTask
from controlplane.core.protocol import StopWorkersCommand
from tests.controlplane.factories import NodeFactory, TaskFactory

ROW_FIELDS = {"type", "command_id", "task_id", "epoch", "snapshot_secret"}


def test_every_queued_command_is_its_protocol_message(db: None) -> None:
    nodes = [NodeFactory(devices=4) for _ in range(2)]
    task = TaskFactory(min_workers=4, max_workers=8)
    with transaction.atomic():
        replan("task_submitted")
    Node.objects.filter(pk=nodes[1].pk).update(state="lost")
    TrainingTask.objects.filter(pk=task.pk).update(state="running")
    with transaction.atomic():
        replan("node_left")
    rows = list(AgentCommand.objects.filter(task=task).order_by("created_at"))
    assert len(rows) >= 2
    assert "start_workers" in {r.type for r in rows}
    for row in rows:
        message = command_message(row)
        assert message.command_id == str(row.command_id)
        assert message.epoch == row.task_epoch
        assert row.payload == message.model_dump(mode="json", exclude=ROW_FIELDS)


def test_a_command_the_protocol_refuses_is_never_queued(db: None) -> None:
    node = NodeFactory(devices=1)
    task = TaskFactory()
    with pytest.raises(ValidationError, match="grace_s"):
        do_enqueue_protocol_command(
            node,
            StopWorkersCommand(command_id=str(uuid.uuid4()), task_id=str(task.pk), epoch=0, grace_s=-1.0),
        )
    assert not AgentCommand.objects.exists()
