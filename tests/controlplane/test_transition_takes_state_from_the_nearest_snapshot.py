"""When no live process holds a shard any more, the new epoch's ranks take their state from a complete
in-memory snapshot an agent listed (its own node's copy first, else a peer's through its endpoint),
before the persistent checkpoint (docs/ARCHITECTURE.md §7.6, nearest principle)."""

from __future__ import annotations

from django.db import transaction

from controlplane.apps.fleet.models import AgentCommand, Node
from controlplane.apps.planning.choices import TransitionKind
from controlplane.apps.planning.models import Transition
from controlplane.apps.planning.replan import replan
from controlplane.apps.planning.restart import restart_in_place
from controlplane.apps.training.models import TrainingTask
from tests.controlplane.factories import FailureEventFactory, NodeFactory, TaskFactory


def test_restart_with_every_rank_dead_uses_the_snapshot(db: None) -> None:
    holder, other = NodeFactory(devices=4), NodeFactory(devices=4)
    task = TaskFactory(min_workers=8, max_workers=8)
    with transaction.atomic():
        replan("task_submitted")
    Transition.objects.filter(task=task).update(state="completed")
    TrainingTask.objects.filter(pk=task.pk).update(state="running", iteration=57)
    task.refresh_from_db()
    world = range(8)
    Node.objects.filter(pk=holder.pk).update(
        snapshot_endpoint="10.0.0.1:7070",
        snapshots=[
            {"task_id": str(task.pk), "epoch": task.epoch, "iteration": 50, "ranks": list(world),
             "origin_node": holder.name, "nbytes": 1},
            {"task_id": str(task.pk), "epoch": task.epoch - 1, "iteration": 55, "ranks": list(world),
             "origin_node": holder.name, "nbytes": 1},  # an older layout's: not usable
        ],
    )  # fmt: skip
    event = FailureEventFactory(task=task, task_epoch=task.epoch, severity="sev2", action="restart_processes")
    with transaction.atomic():
        t = restart_in_place(task, event, set(world), TransitionKind.RESTART)
    assert t is not None
    kinds = {s["kind"] for s in t.migration_sources.values()}
    assert kinds == {"memory_snapshot"}
    assert {s["iteration"] for s in t.migration_sources.values()} == {50}
    for cmd in AgentCommand.objects.filter(transition=t, type="reconfigure"):
        sources = cmd.payload["launch"]["state_sources"]
        assert sources
        for s in sources:
            assert s["source_node"] == holder.name
            # the holder reads its own copy; the other node fetches it from the holder's endpoint
            assert s.get("endpoint") == (None if cmd.node_id == holder.pk else "10.0.0.1:7070")
    assert other.pk in set(AgentCommand.objects.filter(transition=t).values_list("node_id", flat=True))


def _running(task: TrainingTask, iteration: int) -> TrainingTask:
    Transition.objects.filter(task=task).update(state="completed")
    TrainingTask.objects.filter(pk=task.pk).update(state="running", iteration=iteration)
    task.refresh_from_db()
    return task


def test_a_snapshot_of_an_earlier_epoch_with_the_same_layout_is_a_source(db: None) -> None:
    """A restart begins a new epoch with the same layout; until the new epoch snapshots, the previous
    epoch's copy is the nearest stored state (it was skipped: the relaunch fell back to the checkpoint)."""
    holder, _ = NodeFactory(devices=4), NodeFactory(devices=4)
    task = TaskFactory(min_workers=8, max_workers=8)
    with transaction.atomic():
        replan("task_submitted")
    task = _running(task, 40)
    first = task.epoch
    crash = FailureEventFactory(task=task, task_epoch=first, severity="sev2", action="restart_processes")
    with transaction.atomic():
        assert restart_in_place(task, crash, {3}, TransitionKind.RESTART) is not None
    task = _running(task, 44)
    assert task.epoch == first + 1
    Node.objects.filter(pk=holder.pk).update(
        snapshot_endpoint="10.0.0.1:7070",
        snapshots=[
            {"task_id": str(task.pk), "epoch": first, "iteration": 39, "ranks": list(range(8)),
             "origin_node": holder.name, "nbytes": 1},
        ],
    )  # fmt: skip
    again = FailureEventFactory(task=task, task_epoch=task.epoch, severity="sev2", action="restart_processes")
    with transaction.atomic():
        t = restart_in_place(task, again, set(range(8)), TransitionKind.RESTART)
    assert t is not None
    assert {(s["kind"], s["iteration"]) for s in t.migration_sources.values()} == {("memory_snapshot", 39)}


def test_every_launch_names_a_peer_node_to_replicate_its_snapshots_to(db: None) -> None:
    nodes = [NodeFactory(devices=4), NodeFactory(devices=4)]
    for i, n in enumerate(nodes):
        Node.objects.filter(pk=n.pk).update(snapshot_endpoint=f"10.0.0.{i + 1}:7070")
    TaskFactory(min_workers=8, max_workers=8)
    with transaction.atomic():
        replan("task_submitted")
    replicas = {
        c.node_id: c.payload["launch"]["snapshot_replica"]
        for c in AgentCommand.objects.filter(type="start_workers")
    }
    assert replicas == {nodes[0].pk: "10.0.0.2:7070", nodes[1].pk: "10.0.0.1:7070"}
