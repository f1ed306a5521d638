"""A node declared lost because its heartbeats stopped is a liveness verdict, not evidence of a fault:
handling re-plans its tasks once and leaves it `lost` (not isolated, not quarantined), so it is back
in service when it heartbeats again. Cause-evidence from the node still isolates it."""

from __future__ import annotations

from django.db import transaction

from controlplane.apps.fleet.models import Node
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.planning.handling import handle_failure
from controlplane.apps.planning.models import Plan, Transition
from controlplane.apps.planning.replan import replan
from controlplane.apps.training.models import Allocation, TrainingTask
from tests.controlplane.factories import FailureEventFactory, NodeFactory, TaskFactory


def _running_task_and_its_node() -> tuple[TrainingTask, Node]:
    NodeFactory(devices=4)
    NodeFactory(devices=4)
    task = TaskFactory(min_workers=4, max_workers=4)
    with transaction.atomic():
        replan("task_submitted")
    Transition.objects.filter(task=task).update(state="completed")
    TrainingTask.objects.filter(pk=task.pk).update(state="running")
    task.refresh_from_db()
    host = Allocation.objects.filter(task=task, active=True).first().device.node  # type: ignore[union-attr]
    return task, host


def _lost(host: Node) -> int:
    Node.objects.filter(pk=host.pk).update(state="lost")
    return FailureEventFactory(
        node=host, task=None, kind="node_lost", severity="sev1", action="isolate_and_replan",
        detector="node_health",
    ).pk  # fmt: skip


def test_a_node_lost_by_heartbeat_stays_lost_and_its_tasks_are_replanned_once(db: None) -> None:
    _, host = _running_task_and_its_node()
    plans = Plan.objects.count()
    handled = handle_failure(_lost(host))
    assert handled.replanned
    host.refresh_from_db()
    assert (host.state, host.quarantined) == ("lost", False)
    assert Plan.objects.count() == plans + 1
    assert handle_failure(_lost(host)).replanned  # a second loss (a new silence): still not isolated
    host.refresh_from_db()
    assert (host.state, host.quarantined) == ("lost", False)


def test_a_node_event_from_its_own_evidence_still_isolates_it(db: None) -> None:
    _, host = _running_task_and_its_node()
    ev = FailureEventFactory(
        node=host, task=None, kind="gpu_xid_hardware", severity="sev1", action="isolate_and_replan",
        detector="exception_propagation",
    )  # fmt: skip
    handle_failure(ev.pk)
    host.refresh_from_db()
    assert host.state == "isolated"


def test_a_failed_recovery_of_a_node_loss_does_not_isolate_the_node_either(db: None) -> None:
    from controlplane.apps.planning.handling import escalate
    from controlplane.core.failures import Action

    task, host = _running_task_and_its_node()
    lost = FailureEvent.objects.get(pk=_lost(host))
    assert handle_failure(lost.pk).replanned  # the relaunch of its tasks elsewhere then fails
    Node.objects.filter(pk=host.pk).update(state="healthy")  # it heartbeats again meanwhile
    escalated = escalate(lost, task, Action.ISOLATE_AND_REPLAN, "step start timed out", node=host)
    assert escalated is not None
    assert escalated.severity == "sev1"
    assert handle_failure(escalated.pk).replanned
    host.refresh_from_db()
    assert (host.state, host.quarantined) == ("healthy", False)
