"""A suspect node may be a short blip (a CPU-starved control plane, a mass silence the watchdog holds):
a re-plan meanwhile keeps the devices a task holds there for that task — no transition, the same
allocation — but gives them to no other task; once the node is declared lost the task shrinks."""

from __future__ import annotations

from django.db import transaction

from controlplane.apps.fleet.choices import NodeState
from controlplane.apps.fleet.models import Node
from controlplane.apps.planning.models import Plan, Transition
from controlplane.apps.planning.replan import replan
from controlplane.apps.training.models import Allocation, TrainingTask
from tests.controlplane.factories import NodeFactory, TaskFactory


def _placed(task: TrainingTask) -> dict[int, int]:
    """rank -> device id of the task's active allocation."""
    return dict(Allocation.objects.filter(task=task, active=True).values_list("rank", "device_id"))


def _running(task: TrainingTask) -> None:
    """The launch went through: its transition completed, the task runs."""
    Transition.objects.filter(task=task).update(state="completed")
    TrainingTask.objects.filter(pk=task.pk).update(state="running")


def test_a_replan_while_a_node_is_suspect_leaves_its_task_alone_until_the_node_is_lost(db: None) -> None:
    a, b = NodeFactory(devices=1), NodeFactory(devices=1)
    task = TaskFactory(min_workers=1, max_workers=2)
    with transaction.atomic():
        replan("task_submitted")
    _running(task)
    before = _placed(task)
    assert len(before) == 2
    epoch = TrainingTask.objects.get(pk=task.pk).epoch

    Node.objects.filter(pk=b.pk).update(state=NodeState.SUSPECT)
    with transaction.atomic():
        during = replan("weight_changed")

    assert during.transitions == []
    assert _placed(task) == before
    assert TrainingTask.objects.get(pk=task.pk).epoch == epoch
    [row] = Plan.objects.get(pk=during.plan.pk).input_snapshot["tasks"]
    assert (row["workers"], row["reserved"], row["hit"]) == (2, 1, False)

    Node.objects.filter(pk=b.pk).update(state=NodeState.LOST)
    with transaction.atomic():
        after = replan("failure")

    [shrink] = after.transitions
    assert shrink.new_workers == 1
    assert set(_placed(task).values()) == {a.devices.get().pk}


def test_a_suspect_nodes_device_is_not_given_to_another_task(db: None) -> None:
    a, b = NodeFactory(devices=1), NodeFactory(devices=1)
    held = TaskFactory(weight=1.0, min_workers=1, max_workers=1)
    with transaction.atomic():
        replan("task_submitted")
    _running(held)
    [device] = _placed(held).values()
    suspect = a if a.devices.get().pk == device else b
    healthy = b if suspect is a else a
    Node.objects.filter(pk=suspect.pk).update(state=NodeState.SUSPECT)
    heavier = TaskFactory(weight=100.0, min_workers=1, max_workers=2)

    with transaction.atomic():
        decision = replan("task_submitted")

    [launch] = decision.transitions
    assert launch.task_id == heavier.pk
    assert set(_placed(heavier).values()) == {healthy.devices.get().pk}
    assert list(_placed(held).values()) == [device]
