"""What a healthy node runs is compared with what it was given, every few seconds of heartbeats: a
worker that no active allocation accounts for (its task moved away, or it is not the running epoch's
rank on that device) and that two readings in a row list is told to stop. One reading is not enough:
a transition that is being delivered lists old-epoch workers for a moment."""

from __future__ import annotations

from controlplane.apps.fleet.liveness import reconcile_workers
from controlplane.apps.fleet.models import AgentCommand, Node
from controlplane.apps.fleet.outbox import command_message
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.core.protocol import StopWorkersCommand, WorkerStatus
from tests.controlplane.factories import task_placed_on_one_of_two_nodes


def _placed() -> tuple[TrainingTask, Node, Node]:
    task, here, elsewhere = task_placed_on_one_of_two_nodes()
    assert task.state == "running"
    return task, here, elsewhere


def _as_listed(task: TrainingTask, node: Node) -> list[WorkerStatus]:
    """The workers the node's allocations call for, as its heartbeat lists them."""
    return [
        WorkerStatus(
            task_id=str(task.pk),
            epoch=al.epoch,
            rank=al.rank,
            device=al.device.index,
            pid=100 + al.rank,
            state="healthy",
        )
        for al in Allocation.objects.filter(task=task, active=True, device__node=node).select_related(
            "device"
        )
    ]


def _stops(node: Node) -> list[StopWorkersCommand]:
    rows = AgentCommand.objects.filter(node=node, type="stop_workers").order_by("id")
    return [command_message(c) for c in rows]  # type: ignore[misc]


def test_workers_of_a_task_that_moved_away_are_stopped_on_the_second_reading(db: None) -> None:
    task, here, elsewhere = _placed()
    listed = _as_listed(task, here)  # the same workers, listed by a node the task is not on
    first = reconcile_workers(elsewhere.pk, listed, frozenset())
    assert len(first) == 4
    assert _stops(elsewhere) == []
    second = reconcile_workers(elsewhere.pk, listed, first)
    assert second == first
    [stop] = _stops(elsewhere)
    assert (stop.task_id, stop.epoch, stop.ranks, stop.task_ended) == (str(task.pk), task.epoch, None, False)
    reconcile_workers(elsewhere.pk, listed, second)  # its stop is pending: no second one
    assert len(_stops(elsewhere)) == 1


def test_a_rank_of_an_older_epoch_beside_the_running_ones_is_stopped_alone(db: None) -> None:
    task, here, _ = _placed()
    listed = _as_listed(task, here)
    stale = listed[3].model_copy(update={"epoch": task.epoch - 1, "device": 0, "pid": 999})
    current = listed[:3]
    first = reconcile_workers(here.pk, [*current, stale], frozenset())
    assert first == {(str(task.pk), task.epoch - 1, 3, 999)}
    reconcile_workers(here.pk, [*current, stale], first)
    [stop] = _stops(here)
    assert (stop.ranks, stop.epoch, stop.task_ended) == ([3], task.epoch, False)


def test_the_workers_the_allocations_call_for_are_left_alone(db: None) -> None:
    task, here, _ = _placed()
    listed = _as_listed(task, here)
    assert reconcile_workers(here.pk, listed, frozenset()) == frozenset()
    assert _stops(here) == []


def test_a_stray_seen_once_is_not_stopped(db: None) -> None:
    task, here, elsewhere = _placed()
    listed = _as_listed(task, here)
    reconcile_workers(elsewhere.pk, listed, frozenset())
    reconcile_workers(elsewhere.pk, [], frozenset())  # the next reading lists nothing: it went
    assert _stops(elsewhere) == []


def test_a_reconfiguring_task_is_left_to_its_transition(db: None) -> None:
    task, here, _ = _placed()
    listed = [w.model_copy(update={"epoch": task.epoch - 1}) for w in _as_listed(task, here)]
    TrainingTask.objects.filter(pk=task.pk).update(state="reconfiguring")
    first = reconcile_workers(here.pk, listed, frozenset())
    reconcile_workers(here.pk, listed, first)
    assert first == frozenset()
    assert _stops(here) == []


def test_the_workers_of_a_finished_task_are_stopped_with_its_snapshots(db: None) -> None:
    task, here, _ = _placed()
    listed = _as_listed(task, here)
    TrainingTask.objects.filter(pk=task.pk).update(state="cancelled")
    Allocation.objects.filter(task=task).update(active=False)
    reconcile_workers(here.pk, listed, reconcile_workers(here.pk, listed, frozenset()))
    [stop] = _stops(here)
    assert (stop.ranks, stop.task_ended) == (None, True)


def test_a_node_that_is_not_healthy_is_not_reconciled(db: None) -> None:
    task, here, elsewhere = _placed()
    listed = _as_listed(task, here)
    Node.objects.filter(pk=elsewhere.pk).update(state="suspect")
    assert reconcile_workers(elsewhere.pk, listed, frozenset()) == frozenset()
