"""The healthy-cluster optimum: the planner's best WAF over every device of every non-quarantined node,
whatever the node's state, calibrated with a running task's measured speed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.metrics.optimum import get_healthy_cluster_optimum
from controlplane.apps.training.models import Allocation
from tests.controlplane.factories import NodeFactory, TaskFactory


def test_a_lost_node_counts_as_healthy_but_a_quarantined_one_does_not(db: None) -> None:
    nodes = [NodeFactory(devices=4) for _ in range(2)]
    TaskFactory(state="running", max_workers=8)  # 8 micro-batches: DP up to 8
    healthy = get_healthy_cluster_optimum()

    Node.objects.filter(pk=nodes[1].pk).update(state="lost")
    assert get_healthy_cluster_optimum() == pytest.approx(healthy)

    Node.objects.filter(pk=nodes[1].pk).update(state="isolated", quarantined=True)
    smaller = get_healthy_cluster_optimum()
    assert 0 < smaller < healthy


def test_the_optimum_scales_with_weight_and_ignores_finished_tasks(db: None) -> None:
    NodeFactory(devices=2)
    task = TaskFactory(state="pending", weight=1.0, max_workers=2)
    TaskFactory(state="completed", weight=100.0, max_workers=2)
    one = get_healthy_cluster_optimum()

    task.weight = 3.0
    task.save()

    assert one > 0
    assert get_healthy_cluster_optimum() == pytest.approx(3 * one)


def test_a_measured_speed_replaces_the_modelled_one_at_the_current_count(db: None) -> None:
    node = NodeFactory(devices=2)
    task = TaskFactory(state="running", weight=2.0, min_workers=2, max_workers=2)
    for rank, device in enumerate(Device.objects.filter(node=node)):
        Allocation.objects.create(task=task, device=device, rank=rank)
    now = timezone.now()
    Allocation.objects.filter(task=task).update(created_at=now - timedelta(seconds=60))
    modelled = get_healthy_cluster_optimum()
    measured = modelled / 2.0 / 1000  # a CPU-like speed, far below the model
    # from before the current allocation (another worker count): not a measurement of this one
    MetricSample.objects.create(task=task, kind="achieved_flops", value=1.0, at=now - timedelta(seconds=90))
    assert get_healthy_cluster_optimum() == pytest.approx(modelled)

    for age in (1, 2, 3):
        MetricSample.objects.create(
            task=task, kind="achieved_flops", value=measured, at=now - timedelta(seconds=age)
        )

    assert get_healthy_cluster_optimum() == pytest.approx(2.0 * measured, rel=1e-2)
