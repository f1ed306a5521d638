"""A transition step that failed because the agent could not fetch a snapshot from its peer (refused by
the snapshot key check, an unknown or unreachable peer) fails the transition without blaming the node
that fetched: the escalation names no node, and that peer's copies of the task leave the planner's view
so the next plan takes the next source. Any other failed command still blames its node."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from controlplane.apps.fleet.models import AgentCommand, Node
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.planning.models import Transition
from controlplane.apps.planning.replan import replan
from controlplane.apps.planning.transitions import advance_transition
from controlplane.apps.training.models import TrainingTask
from tests.controlplane.factories import NodeFactory, TaskFactory


def _launch_with_a_copy_on(holder: Node) -> tuple[TrainingTask, Transition, AgentCommand]:
    task = TaskFactory(min_workers=4, max_workers=4)
    with transaction.atomic():
        (t,) = replan("task_submitted").transitions
    info = {
        "task_id": str(task.pk),
        "epoch": 1,
        "iteration": 4,
        "ranks": [0],
        "origin_node": "x",
        "nbytes": 1,
    }
    Node.objects.filter(pk=holder.pk).update(snapshots=[info], snapshot_endpoint="10.9.9.9:7001")
    command = AgentCommand.objects.get(transition=t)
    return task, t, command


def _fail(command: AgentCommand, error: str) -> None:
    AgentCommand.objects.filter(pk=command.pk).update(state="failed", error=error, acked_at=timezone.now())


def test_a_refused_fetch_escalates_without_a_node_and_withdraws_the_copy(db: None) -> None:
    fetcher = NodeFactory(devices=4)
    holder = NodeFactory(devices=0)
    task, t, command = _launch_with_a_copy_on(holder)
    _fail(
        command,
        "failed: SnapshotFetchFailed: snapshot fetch from 10.9.9.9:7001 failed: 10.9.9.9:7001: "
        "bad_mac: the request's MAC does not match task's key",
    )

    assert advance_transition(t.pk) == "failed"

    escalated = FailureEvent.objects.get(task=task, kind="recovery_failed")
    assert escalated.node_id is None
    fetcher.refresh_from_db()
    assert fetcher.state == "healthy"
    holder.refresh_from_db()
    assert holder.snapshots == []


def test_any_other_failed_command_still_blames_its_node(db: None) -> None:
    fetcher = NodeFactory(devices=4)
    holder = NodeFactory(devices=0)
    task, t, command = _launch_with_a_copy_on(holder)
    _fail(command, "failed: RuntimeError: the worker could not start")

    assert advance_transition(t.pk) == "failed"

    escalated = FailureEvent.objects.get(task=task, kind="recovery_failed")
    assert escalated.node_id == fetcher.pk
    holder.refresh_from_db()
    assert len(holder.snapshots) == 1
