"""A node that comes back listing workers of a task that moved away while it was cut off (or that
ended) is told to stop them: they would train a second copy of the task and write its checkpoints.
Workers of a task still allocated on the node are left to its transitions."""

from __future__ import annotations

from django.db import transaction

from controlplane.apps.fleet.liveness import apply_hello, revive_node
from controlplane.apps.fleet.models import AgentCommand, Node
from controlplane.apps.fleet.outbox import command_message
from controlplane.apps.training.models import TrainingTask
from controlplane.core.protocol import DeviceInfo, Hello, WorkerStatus
from tests.controlplane.factories import task_placed_on_one_of_two_nodes

GB = 1024**3


def _hello(task: TrainingTask, epoch: int) -> Hello:
    return Hello(
        agent_version="test",
        hostname="h",
        worker_kind="megatron",
        devices=[
            DeviceInfo(index=i, kind="cuda", name="NVIDIA H100 80GB HBM3", memory_bytes=80 * GB)
            for i in range(4)
        ],
        workers=[
            WorkerStatus(task_id=str(task.pk), epoch=epoch, rank=r, device=r, pid=100 + r, state="healthy")
            for r in range(2)
        ],
    )


def test_workers_of_a_task_that_moved_away_are_stopped(db: None) -> None:
    task, _, elsewhere = task_placed_on_one_of_two_nodes()
    with transaction.atomic():
        apply_hello(elsewhere.pk, _hello(task, task.epoch - 1 if task.epoch > 1 else task.epoch))
        apply_hello(elsewhere.pk, _hello(task, task.epoch))  # a second hello adds no second stop
    stops = AgentCommand.objects.filter(node=elsewhere, type="stop_workers")
    assert [(c.task_id, c.task_epoch, c.state) for c in stops] == [(task.pk, task.epoch, "pending")]
    assert command_message(stops[0]).task_ended is False  # type: ignore[union-attr]  # its snapshots stay


def test_workers_of_a_task_allocated_on_the_node_are_left_alone(db: None) -> None:
    task, here, _ = task_placed_on_one_of_two_nodes()
    with transaction.atomic():
        apply_hello(here.pk, _hello(task, task.epoch))
    assert not AgentCommand.objects.filter(node=here, type="stop_workers").exists()


def test_workers_of_a_finished_task_are_stopped(db: None) -> None:
    task, here, _ = task_placed_on_one_of_two_nodes()
    TrainingTask.objects.filter(pk=task.pk).update(state="cancelled")
    with transaction.atomic():
        apply_hello(here.pk, _hello(task, task.epoch))
    [stop] = AgentCommand.objects.filter(node=here, type="stop_workers", task=task)
    assert command_message(stop).task_ended is True  # type: ignore[union-attr]  # its snapshots go too


def test_a_frozen_node_back_by_heartbeat_is_told_to_stop_the_workers_of_a_task_that_moved(db: None) -> None:
    """A node frozen (SIGSTOP, a hung kernel) keeps its socket: it comes back by heartbeat, not by hello,
    and its heartbeat lists the workers that froze with it."""
    task, _, elsewhere = task_placed_on_one_of_two_nodes()
    Node.objects.filter(pk=elsewhere.pk).update(state="suspect")
    heartbeat_workers = _hello(task, task.epoch).workers
    with transaction.atomic():
        assert revive_node(elsewhere.pk, warming=False, workers=heartbeat_workers) == "healthy"
    stops = AgentCommand.objects.filter(node=elsewhere, type="stop_workers")
    assert [(c.task_id, c.task_epoch) for c in stops] == [(task.pk, task.epoch)]
