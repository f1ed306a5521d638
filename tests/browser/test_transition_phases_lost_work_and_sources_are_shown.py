"""Reconfiguration history and task detail show a transition's time per phase, lost work and the
migration sources from its row, and pick up a new transition live."""

from __future__ import annotations

from typing import Any

from tests.browser.conftest import assert_not_reloaded, mark_page, services

PHASES = {
    "teardown": 1.4,
    "rendezvous": 1.1,
    "migrate": 2.3,
    "recompute": 1.6,
    "first_iteration": 1.9,
    "total": 8.5,
}
SOURCES = {
    "4": {"source": "dp_peer", "source_node": "node-b", "source_rank": 12},
    "5": {"source": "dp_peer", "source_node": "node-b", "source_rank": 13},
    "6": {"source": "local_snapshot", "source_node": "node-a"},
}


def _replan(task: Any) -> int:
    from controlplane.apps.planning.choices import PlanTrigger, TransitionState
    from controlplane.apps.planning.services import (
        PlanRecord,
        do_create_transition,
        do_record_plan,
        do_set_transition_state,
    )

    plan = do_record_plan(
        PlanRecord(
            PlanTrigger.FAILURE,
            {},
            [{"task": task.pk, "old_workers": 10, "new_workers": 8}],
            5e15,
            1e13,
            3000.0,
            0.4,
            explanation="dp: node-c lost; gpt-1.3b-code shrinks 10 -> 8 workers",
        )
    )
    t = do_create_transition(plan, task, ["reconfigure", "resume"], 10, 8)
    t = do_set_transition_state(t, TransitionState.RUNNING)
    do_set_transition_state(
        t,
        TransitionState.COMPLETED,
        phases_s=PHASES,
        migration_sources=SOURCES,
        lost_microbatches=3,
        lost_work_s=0.57,
    )
    return int(plan.pk)


def test_phases_lost_work_and_sources_on_history_and_task_detail(
    cluster: Any, new_page: Any, live_url: str
) -> None:
    task = cluster.tasks[1]
    page = new_page("viewer")
    page.goto(f"{live_url}/history/")
    page.wait_for_selector("[data-testid=timeline] .empty")
    mark_page(page)

    plan_id = services(_replan, task)

    item = f"#plan-{plan_id}"
    page.wait_for_selector(f"{item} [data-testid=phase-bar]")  # appeared live
    for phase, secs in PHASES.items():
        if phase != "total":
            assert f"{secs:.2f} s" in page.text_content(f"{item} [data-phase={phase}]")
    assert page.text_content(f"{item} [data-testid=lost-work]") == "3 micro-batches · 570 ms recompute"
    sources = page.text_content(f"{item} [data-testid=migration-sources]")
    assert "dp peer \u00d72 (from node-b)" in sources
    assert "local snapshot \u00d71 (from node-a)" in sources
    assert "node-c lost" in page.text_content(f"{item} pre.explain")
    assert_not_reloaded(page)

    page.goto(f"{live_url}/tasks/{task.pk}/")
    row = page.wait_for_selector("[data-testid=allocation-history] tr[data-transition]")
    text = row.text_content()
    assert "10 → 8" in text
    assert "migrate 2.30 s" in text
    assert "3 micro-batches" in text
    assert "dp peer \u00d72" in text
