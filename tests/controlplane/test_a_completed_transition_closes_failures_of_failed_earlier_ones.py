"""A failure whose recovery transition failed (and was escalated) or was superseded is over once a later
transition of the task completes: the task left that epoch and runs again. Before, a node loss whose
relaunch timed out kept its event open for good (e2e megatron node loss, under load)."""

from __future__ import annotations

from django.db import transaction

from controlplane.apps.fleet.models import Node
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.planning.choices import TransitionKind
from controlplane.apps.planning.handling import handle_failure
from controlplane.apps.planning.models import Transition
from controlplane.apps.planning.replan import replan
from controlplane.apps.planning.restart import restart_in_place
from controlplane.apps.planning.transitions import advance_transition
from controlplane.apps.training.models import Allocation, TrainingTask
from tests.controlplane.factories import FailureEventFactory, NodeFactory, TaskFactory


def test_the_failure_of_a_failed_transition_is_resolved_when_a_later_one_completes(db: None) -> None:
    NodeFactory(devices=4)
    task = TaskFactory(min_workers=4, max_workers=4)
    with transaction.atomic():
        replan("task_submitted")
    Transition.objects.filter(task=task).update(state="completed")
    TrainingTask.objects.filter(pk=task.pk).update(state="running")
    task.refresh_from_db()
    first = FailureEventFactory(task=task, task_epoch=task.epoch, severity="sev2", action="restart_processes")
    with transaction.atomic():
        failed = restart_in_place(task, first, {1}, TransitionKind.RESTART)
    assert failed is not None
    FailureEvent.objects.filter(pk=first.pk).update(transition=failed)
    Transition.objects.filter(pk=failed.pk).update(state="failed")
    task.refresh_from_db()
    again = FailureEventFactory(task=task, task_epoch=task.epoch, severity="sev2", action="restart_processes")
    with transaction.atomic():
        later = restart_in_place(task, again, {1}, TransitionKind.RESTART)
    assert later is not None
    later.steps.update(state="done")
    assert advance_transition(later.pk) == "completed"
    first.refresh_from_db()
    again.refresh_from_db()
    assert again.resolved_at is not None
    assert first.resolved_at is not None


def test_a_task_failure_handed_over_to_its_node_loss_is_resolved_with_the_relaunch(db: None) -> None:
    """A worker's connection reset on a node that is then declared lost is handed over to the node
    event; the node event's re-plan links it to the relaunch, which resolves it (it stayed open)."""
    NodeFactory(devices=4)
    NodeFactory(devices=4)
    task = TaskFactory(min_workers=4, max_workers=4)
    with transaction.atomic():
        replan("task_submitted")
    Transition.objects.filter(task=task).update(state="completed")
    TrainingTask.objects.filter(pk=task.pk).update(state="running")
    task.refresh_from_db()
    host = Allocation.objects.filter(task=task, active=True).first().device.node  # type: ignore[union-attr]
    Node.objects.filter(pk=host.pk).update(state="lost")
    lost = FailureEventFactory(
        node=host,
        task=None,
        kind="node_lost",
        severity="sev1",
        action="isolate_and_replan",
        detector="node_health",
    )
    reset = FailureEventFactory(
        node=host, task=task, task_epoch=task.epoch, severity="sev3", action="retry_in_place",
        evidence={"report": {"rank": 1, "event": {"kind": "exception", "waiting": True}}},
    )  # fmt: skip
    assert handle_failure(reset.pk).note.startswith("handed over")
    assert handle_failure(lost.pk).note.startswith("node")
    reset.refresh_from_db()
    assert reset.transition_id is not None
    relaunch = Transition.objects.get(pk=reset.transition_id)
    relaunch.steps.update(state="done")
    assert advance_transition(relaunch.pk) == "completed"
    reset.refresh_from_db()
    assert reset.resolved_at is not None
