"""The healthy-cluster optimum: the planner's best WAF over every device of every non-quarantined node,
whatever the node's state, with the calibration the plans use."""

from __future__ import annotations

import pytest

from controlplane.apps.fleet.models import Node
from controlplane.apps.metrics.optimum import get_healthy_cluster_optimum
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


def test_the_optimum_follows_the_calibration_the_plans_use(db: None) -> None:
    NodeFactory(devices=2)
    task = TaskFactory(state="running", weight=2.0, min_workers=2, max_workers=2)
    nominal = get_healthy_cluster_optimum()

    # the workload manager's calibration from measured iteration times: a tenth of the modelled speed
    task.throughput_table = {
        "device_kind": "h100-80g",
        "efficiency": {"compute": 0.05, "communication": 0.05, "overhead_s": 0.0},
    }
    task.save()

    assert 0 < get_healthy_cluster_optimum() < nominal
