"""The transition watchdog: a step past its deadline fails the transition, its unacked commands are
failed (never delivered), and the failure is escalated (re-classified during recovery) with an alert;
acks complete the command steps and progress reports at the new epoch complete the resume step."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from controlplane.apps.fleet.models import AgentCommand
from controlplane.apps.incidents.models import Alert, FailureEvent
from controlplane.apps.planning.models import TransitionStep
from controlplane.apps.planning.replan import replan
from controlplane.apps.planning.transitions import (
    advance_transition,
    check_transitions,
    do_record_rank_resumed,
)
from tests.controlplane.factories import NodeFactory, TaskFactory


def test_overdue_step_fails_and_escalates(db: None) -> None:
    NodeFactory(devices=8)
    task = TaskFactory(min_workers=8, max_workers=8)
    with transaction.atomic():
        (t,) = replan("task_submitted").transitions
    TransitionStep.objects.filter(transition=t).update(deadline_at=timezone.now() - timedelta(seconds=1))
    assert check_transitions()["failed"] == 1
    t.refresh_from_db()
    assert t.state == "failed"
    assert "timed out" in t.error
    assert set(AgentCommand.objects.filter(transition=t).values_list("state", flat=True)) == {"failed"}
    escalated = FailureEvent.objects.get(task=task, kind="recovery_failed")
    assert escalated.detector == "orchestrator"
    assert escalated.node_id is not None  # the node whose command was never acked
    assert Alert.objects.filter(source_event=escalated, message__startswith="Escalated").exists()


def test_acks_and_reports_complete_a_transition(db: None) -> None:
    NodeFactory(devices=4)
    task = TaskFactory(min_workers=4, max_workers=4)
    with transaction.atomic():
        (t,) = replan("task_submitted").transitions
    assert advance_transition(t.pk) == "running"
    AgentCommand.objects.filter(transition=t).update(state="acked", acked_at=timezone.now())
    assert advance_transition(t.pk) == "running"  # acks alone: the ranks have not resumed yet
    for rank in range(4):
        do_record_rank_resumed(task.pk, t.epoch, rank, 0, 3)
    assert advance_transition(t.pk) == "completed"
    t.refresh_from_db()
    assert t.state == "completed"
    assert "total" in t.phases_s
    task.refresh_from_db()
    assert task.state == "running"
