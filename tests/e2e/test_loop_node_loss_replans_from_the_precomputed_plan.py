"""A node loss (sim agents): node health monitoring → sev1 → re-plan (a lookup in the precomputed
plans) → the task continues on the surviving node; the node's return grows it back."""

from __future__ import annotations

import pytest

from controlplane.apps.fleet.models import Node
from controlplane.apps.planning.models import Plan, Transition
from controlplane.apps.training.models import Allocation
from tests.e2e.loop import Loop, assert_allocations_consistent, fault_and_recover

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_node_loss(loop: Loop) -> None:
    r = fault_and_recover(loop, "node_loss", "node_health", rank=2)
    assert r.event.kind == "node_lost"
    assert r.event.severity == "sev1"
    assert r.event.action == "isolate_and_replan"
    lost = Node.objects.get(pk=r.event.node_id)
    assert lost.state == "lost"
    plan = Plan.objects.get(pk=r.transition.plan_id)
    assert plan.trigger == "failure"
    assert plan.failure_event_id == r.event.pk
    assert plan.lookup, "the node-loss decision should come from the precomputed plans"
    assert r.transition.kind == "reconfigure"
    assert r.transition.new_workers == 2
    assert not Allocation.objects.filter(task=r.task, active=True, device__node=lost).exists()
    # the node comes back: the task grows again
    loop.start_agent(lost.name)
    grown = loop.wait(
        "the task grown back to 4 workers",
        lambda: Transition.objects.filter(
            task=r.task, new_workers=4, state="completed", epoch__gt=r.transition.epoch
        ).first(),
        timeout=90,
    )
    assert Plan.objects.get(pk=grown.plan_id).trigger == "node_joined"
    assert_allocations_consistent()
