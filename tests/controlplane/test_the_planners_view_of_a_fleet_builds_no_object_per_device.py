"""The planner's view of the cluster (``load_cluster``) and the healthy-cluster optimum the WAF sampler
computes every few seconds read a fleet's devices as plain rows: no ``Device`` instance is built, so the
re-plans and the periodic tasks that read the whole fleet do not pay for thousands of model objects. The
view itself is unchanged: the usable devices, the held ones and their ranks.

An in-place recovery (sev2 restart, sev3 retry) keeps its task's devices, so it reads the nodes and that
task's allocation alone (``load_task_view``), and judges each device exactly as the whole view does."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db.models.signals import post_init

from controlplane.apps.fleet.choices import DeviceState, NodeState
from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.planning.selectors import build_planning_problem, load_cluster, load_task_view
from controlplane.apps.training.models import Allocation
from tests.controlplane.factories import NodeFactory, TaskFactory


@contextmanager
def devices_built() -> Iterator[list[int]]:
    built: list[int] = []

    def count(sender: type[Device], **_: object) -> None:
        built.append(1)

    post_init.connect(count, sender=Device)
    try:
        yield built
    finally:
        post_init.disconnect(count, sender=Device)


@pytest.mark.django_db
def test_the_planners_view_of_a_fleet_builds_no_object_per_device() -> None:
    nodes = [NodeFactory(devices=8) for _ in range(6)]
    task = TaskFactory(state="running", parallel_config={"tp": 1, "pp": 1, "dp": 4, "micro_batch": 4})
    for rank, device in enumerate(nodes[0].devices.order_by("index")[:4]):
        Allocation.objects.create(task=task, device=device, rank=rank, epoch=1)
    Device.objects.filter(node=nodes[1], index=0).update(state=DeviceState.ISOLATED)
    Node.objects.filter(pk=nodes[2].pk).update(state=NodeState.LOST)

    with devices_built() as built:
        view = load_cluster()
        healthy = build_planning_problem(healthy=True)
    assert built == []

    assert len(view.usable) == 6 * 8 - 1 - 8
    assert all(s.node != nodes[2].name for s in view.usable)
    assert [(h.slot.node, h.slot.index, h.rank, h.usable) for h in view.held[task.pk]] == [
        (nodes[0].name, i, i, True) for i in range(4)
    ]
    assert {s.device_id for s in view.free()} == {s.device_id for s in view.usable} - {
        h.slot.device_id for h in view.held[task.pk]
    }
    assert healthy.capacity_units == 6 * 8
    assert all(t.workers == 0 and not t.hit for t in healthy.tasks)


@pytest.mark.django_db
def test_an_in_place_recovery_reads_its_tasks_devices_and_judges_them_as_the_whole_view_does() -> None:
    nodes = [NodeFactory(devices=8) for _ in range(5)]
    other_kind = NodeFactory(devices=0)
    Device.objects.create(node=other_kind, index=0, kind="a100-40g", memory_bytes=40 * 10**9)
    task = TaskFactory(state="running", parallel_config={"tp": 1, "pp": 1, "dp": 8, "micro_batch": 4})
    held_devices = [
        *nodes[0].devices.order_by("index")[:2],  # healthy
        *nodes[1].devices.order_by("index")[:2],  # the node turns suspect: reserved for the task
        *nodes[2].devices.order_by("index")[:2],  # one device isolated
        *nodes[3].devices.order_by("index")[:1],  # the node is quarantined
        *other_kind.devices.all(),  # not of the planning kind
    ]
    for rank, device in enumerate(held_devices):
        Allocation.objects.create(task=task, device=device, rank=rank, epoch=1)
    bystander = TaskFactory(state="running")
    Allocation.objects.create(task=bystander, device=nodes[4].devices.get(index=0), rank=0, epoch=1)
    Node.objects.filter(pk=nodes[1].pk).update(state=NodeState.SUSPECT)
    Device.objects.filter(node=nodes[2], index=1).update(state=DeviceState.ISOLATED)
    Node.objects.filter(pk=nodes[3].pk).update(quarantined=True)
    Node.objects.filter(pk=nodes[4].pk).update(snapshot_endpoint="10.0.0.9:7070")

    with devices_built() as built:
        nodes_view, held = load_task_view(task)
    whole = load_cluster()

    assert held == whole.held[task.pk]
    assert [h.usable for h in held] == [True, True, True, True, True, False, False, False]
    assert nodes_view.usable_nodes == whole.usable_nodes
    assert nodes_view.nodes_by_name.keys() == whole.nodes_by_name.keys()
    assert nodes_view.nodes_by_name[nodes[4].name].snapshot_endpoint == "10.0.0.9:7070"
    assert len(built) == len(held_devices)  # the task's devices, none of the fleet's other 33
