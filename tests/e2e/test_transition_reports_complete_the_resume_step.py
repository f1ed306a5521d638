"""A TransitionReport from every rank of the new epoch completes the transition's resume step, and its
source / cost is kept for the transition's record; a report of an older epoch is ignored."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from channels.db import database_sync_to_async
from django.db import transaction

from controlplane.apps.planning.models import Transition, TransitionStep
from controlplane.apps.planning.replan import replan
from controlplane.apps.training.models import TrainingTask
from controlplane.apps.training.services import TaskSubmission, do_submit_task
from tests.e2e.conftest import AgentSocket, Connect, Registered


async def settle(agent: AgentSocket) -> None:
    """Like ``AgentSocket.settle``, skipping the commands the re-plan pushed to this agent (and the
    refusal of a report for an epoch this node never ran)."""
    await agent.send_raw("not json")
    while (await agent.receive())["message"].get("code") != "malformed":
        pass


def transition_report(task: int, epoch: int, rank: int) -> dict[str, Any]:
    now = datetime.now(UTC).isoformat()
    return {
        "type": "worker_report",
        "report_id": str(uuid.uuid4()),
        "task_id": str(task),
        "epoch": epoch,
        "rank": rank,
        "device": rank,
        "detector": None,
        "occurred_at": now,
        "detected_at": now,
        "event": {
            "kind": "transition",
            "from_epoch": None,
            "iteration": 0,
            "in_place": False,
            "source": "none",
            "phases_s": {"rendezvous": 0.25, "first_iteration": 0.5},
        },
    }


def _launch() -> tuple[int, int]:
    task = do_submit_task(
        None,
        TaskSubmission(
            name="t",
            num_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            seq_length=32,
            vocab_size=128,
            global_batch_size=8,
            micro_batch_size=2,
            min_workers=2,
            max_workers=2,
        ),
    )
    with transaction.atomic():
        (t,) = replan("task_submitted").transitions
    return task.pk, t.pk


async def test_reports_complete_the_resume_step(registered: Registered, connect: Connect) -> None:
    node = registered
    agent = await connect(node.token, node.name)
    await agent.hello(devices=2)
    await agent.settle()
    task_id, t_id = await database_sync_to_async(_launch)()
    epoch = (await database_sync_to_async(TrainingTask.objects.get)(pk=task_id)).epoch
    await agent.send(transition_report(task_id, epoch - 1, 0))  # an epoch it never ran: refused
    await agent.send(transition_report(task_id, epoch, 0))
    await settle(agent)
    step = await database_sync_to_async(TransitionStep.objects.get)(transition_id=t_id, name="resume")
    assert set(step.detail["reported"]) == {"0"}
    await agent.send(transition_report(task_id, epoch, 1))
    await settle(agent)
    step = await database_sync_to_async(TransitionStep.objects.get)(transition_id=t_id, name="resume")
    assert set(step.detail["reported"]) == {"0", "1"}
    assert step.detail["reported"]["1"]["report"]["phases_s"]["rendezvous"] == 0.25
    t = await database_sync_to_async(Transition.objects.get)(pk=t_id)
    assert t.state == "running"  # the start commands are not acked yet; advancing is the worker's job
