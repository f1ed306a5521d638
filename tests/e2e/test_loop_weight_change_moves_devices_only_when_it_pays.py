"""Two tasks share four devices, 2 + 2 (a is capped at 2). A weight change re-plans; devices move only
when the gain over D_running exceeds the transition
cost. The weight for the "does not pay" case is found with the planner itself: the smallest weight
for which a free (zero-cost) transition would move devices."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from controlplane.apps.planning.models import Plan, Transition
from controlplane.apps.planning.selectors import build_planning_problem
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.apps.training.services import do_change_weight
from controlplane.core.planning import TransitionModel, plan
from tests.e2e.loop import Loop, assert_allocations_consistent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

D_RUNNING_CAP_S = 600.0  # as in tests/e2e/conftest.py LOOP_ENV: transitions cost 5 % of the horizon


def optimum(weights: dict[str, float], free: bool) -> dict[str, int]:
    p = build_planning_problem()
    zero = TransitionModel(state_bytes=0.0, restart_s=0.0, rollback_s=0.0)
    tasks = tuple(
        replace(t, weight=weights.get(t.task_id, t.weight), transition=zero if free else t.transition)
        for t in p.tasks
    )
    return plan(replace(p, tasks=tasks)).new_counts


def current() -> dict[str, int]:
    tasks = TrainingTask.objects.all()
    return {str(t.pk): Allocation.objects.filter(task=t, active=True).count() for t in tasks}


def test_weight_change(loop: Loop, settings: Any) -> None:
    settings.UNICRON_D_RUNNING_CAP_S = D_RUNNING_CAP_S
    settings.UNICRON_TRANSITION_RESTART_S = 30.0
    loop.add_node(2)
    loop.add_node(2)
    loop.wait_nodes_healthy(2)
    a = loop.submit("a", weight=1.0, min_workers=1, max_workers=2, total_iterations=100000)
    loop.wait_running(a)
    b = loop.submit("b", weight=1.0, min_workers=1, max_workers=4, total_iterations=100000)
    loop.wait_running(b)
    loop.wait("both planned", lambda: all(v > 0 for v in current().values()) and sum(current().values()) == 4)
    before = current()
    # the smallest weight of b for which a zero-cost transition would move devices
    w = 1.0
    while optimum({str(b.pk): w}, free=True) == before and w < 50:
        w *= 1.01
    assert optimum({str(b.pk): w}, free=True) != before
    assert optimum({str(b.pk): w}, free=False) == before, "no weight where the cost decides; widen D_running"

    b = do_change_weight(None, b, w)
    small = loop.wait(
        "the plan for the small change", lambda: Plan.objects.filter(trigger="weight_changed").first()
    )
    assert not Transition.objects.filter(plan=small).exists()  # it does not pay
    assert current() == before

    do_change_weight(None, b, 20.0)
    big = loop.wait(
        "the plan for the big change",
        lambda: Plan.objects.filter(trigger="weight_changed", id__gt=small.pk).first(),
    )
    moved = Transition.objects.filter(plan=big)
    assert moved.exists()  # it pays
    for t in moved:
        loop.wait("the move completed", lambda t=t: Transition.objects.get(pk=t.pk).state == "completed", 90)
    after = current()
    assert after[str(b.pk)] > before[str(b.pk)]
    assert sum(after.values()) <= 4
    assert_allocations_consistent()
