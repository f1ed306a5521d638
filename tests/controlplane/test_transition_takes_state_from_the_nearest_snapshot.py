"""When no live process holds a shard any more, the new epoch's ranks take their state from a complete
in-memory snapshot an agent listed (its own node's copy first, else a peer's through its endpoint),
before the persistent checkpoint (DESIGN §7, nearest principle)."""

from __future__ import annotations

from django.db import transaction

from controlplane.apps.fleet.models import AgentCommand, Node
from controlplane.apps.planning.choices import TransitionKind
from controlplane.apps.planning.models import Transition
from controlplane.apps.planning.workload import replan, restart_in_place
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
