"""The workload manager on rows alone (no agents): a re-plan records a plan, allocates devices, bumps
epochs and queues one command per node linked to its transition; the next node loss is a lookup in
the precomputed plans; a task that does not fit waits with a visible reason."""

from __future__ import annotations

from django.db import transaction

from controlplane.apps.fleet.choices import NodeState
from controlplane.apps.fleet.models import AgentCommand, Node
from controlplane.apps.planning.models import Plan, Transition
from controlplane.apps.planning.precomputed import precomputed, refresh_precomputed
from controlplane.apps.planning.replan import replan
from controlplane.apps.training.models import Allocation, TrainingTask
from tests.controlplane.factories import FailureEventFactory, NodeFactory, TaskFactory


def test_replan_launches_then_a_node_loss_is_a_lookup(db: None) -> None:
    nodes = [NodeFactory(devices=8) for _ in range(2)]
    big = TaskFactory(weight=2.0, min_workers=8, max_workers=16)
    with transaction.atomic():
        decision = replan("task_submitted")
    plan = decision.plan
    assert plan.trigger == "task_submitted"
    assert not plan.lookup
    assert plan.compute_time_ms > 0
    (t,) = decision.transitions
    assert (t.kind, t.state, t.epoch, t.new_workers) == ("launch", "running", 1, 16)
    big.refresh_from_db()
    assert (big.state, big.epoch) == ("running", 1)
    assert big.parallel_config["tp"] * big.parallel_config["pp"] * big.parallel_config["dp"] == 16
    allocs = Allocation.objects.filter(task=big, active=True)
    assert sorted(allocs.values_list("rank", flat=True)) == list(range(16))
    commands = AgentCommand.objects.filter(transition=t)
    assert sorted(c.node_id for c in commands) == sorted(n.pk for n in nodes)
    assert {c.type for c in commands} == {"start_workers"}
    ports = {c.payload["launch"]["rendezvous"]["master_port"] for c in commands}
    assert ports == {t.rendezvous_port}
    assert {c.task_epoch for c in commands} == {1}
    assert [s.name for s in t.steps.order_by("order")] == ["start", "resume"]

    refresh_precomputed()
    assert precomputed().local
    Node.objects.filter(pk=nodes[1].pk).update(state=NodeState.LOST)
    with transaction.atomic():
        after = replan("failure")
    assert after.plan.lookup, "the state after a node's loss was precomputed"
    (moved,) = after.transitions
    assert moved.new_workers == 8
    assert moved.epoch == 2
    assert not Allocation.objects.filter(task=big, active=True, device__node=nodes[1]).exists()
    assert Transition.objects.get(pk=t.pk).state == "rolled_back"  # superseded
    # the launch's commands can no longer be delivered (fencing on the coordinator side too)
    assert set(AgentCommand.objects.filter(transition=t).values_list("state", flat=True)) == {"failed"}


def test_a_task_that_does_not_fit_waits_with_a_reason(db: None) -> None:
    NodeFactory(devices=8)
    running = TaskFactory(weight=10.0, min_workers=8, max_workers=8)
    waiting = TaskFactory(weight=1.0, min_workers=8, max_workers=8)
    with transaction.atomic():
        decision = replan("task_submitted")
    assert [t.task_id for t in decision.transitions] == [running.pk]
    waiting.refresh_from_db()
    assert waiting.state == "pending"
    assert waiting.pending_reason.startswith("queued")
    assert Plan.objects.count() == 1
    assert TrainingTask.objects.get(pk=running.pk).state == "running"


def test_an_isolated_node_is_told_to_stop_the_workers_it_no_longer_runs(db: None) -> None:
    """Isolation (a straggler, repeated failures) leaves the node's agent linked and its workers alive:
    without a stop they would go on training a second copy of the task next to the moved one."""
    a, b = NodeFactory(devices=4), NodeFactory(devices=4)
    task = TaskFactory(min_workers=4, max_workers=4)
    with transaction.atomic():
        replan("task_submitted")
    Transition.objects.filter(task=task).update(state="completed")
    TrainingTask.objects.filter(pk=task.pk).update(state="running")
    (before,) = {al.device.node_id for al in Allocation.objects.filter(task=task, active=True)}
    gone = a if before == a.pk else b
    Node.objects.filter(pk=gone.pk).update(state=NodeState.ISOLATED)
    with transaction.atomic():
        decision = replan("node_left")
    (t,) = decision.transitions
    stop = AgentCommand.objects.filter(transition=t, type="stop_workers")
    assert [c.node_id for c in stop] == [gone.pk]
    assert t.steps.order_by("order").first().name == "stop"  # type: ignore[union-attr]
    assert {al.device.node_id for al in Allocation.objects.filter(task=task, active=True)} == {
        ({a.pk, b.pk} - {gone.pk}).pop()
    }


def test_a_survivor_that_saw_the_loss_and_waits_is_reconfigured_in_place(db: None) -> None:
    """Its node's peer died: the survivor's worker reported the connection reset and waits for its
    order. It is alive, so the re-plan reconfigures it in place (it was counted dead: a relaunch from a
    snapshot, with rolled-back work and a fresh process, bench/recovery T8)."""
    for _ in range(3):
        NodeFactory(devices=1)
    task = TaskFactory(min_workers=2, max_workers=2)
    with transaction.atomic():
        replan("task_submitted")
    Transition.objects.filter(task=task).update(state="completed")
    TrainingTask.objects.filter(pk=task.pk).update(state="running")
    task.refresh_from_db()
    by_rank = {al.rank: al.device for al in Allocation.objects.filter(task=task, active=True)}
    Node.objects.filter(pk=by_rank[1].node_id).update(state=NodeState.LOST)
    waits = {"report": {"rank": 0, "event": {"kind": "exception", "waiting": True}}}
    FailureEventFactory(
        node=Node.objects.get(pk=by_rank[0].node_id), task=task, task_epoch=task.epoch, severity="sev3",
        action="retry_in_place", evidence=waits,
    )  # fmt: skip
    with transaction.atomic():
        decision = replan("node_left")
    (t,) = decision.transitions
    assert t.kind == "reconfigure"
    survivors = {tuple(x) for x in t.steps.get(name="reconfigure").detail["survivors"]}
    assert survivors == {(0, 0)}
