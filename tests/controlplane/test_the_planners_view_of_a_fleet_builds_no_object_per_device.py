"""The planner's view of the cluster (``load_cluster``) and the healthy-cluster optimum the WAF sampler
computes every few seconds read a fleet's devices as plain rows: no ``Device`` instance is built, so the
failure handler and the periodic tasks that read the whole fleet do not pay for thousands of model objects.
The view itself is unchanged: the usable devices, the held ones and their ranks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db.models.signals import post_init

from controlplane.apps.fleet.choices import DeviceState, NodeState
from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.planning.selectors import build_planning_problem, load_cluster
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
