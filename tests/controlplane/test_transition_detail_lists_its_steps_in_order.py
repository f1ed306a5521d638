from __future__ import annotations

from rest_framework.test import APIClient

from controlplane.apps.planning.choices import StepState, TransitionState
from controlplane.apps.planning.services import (
    do_create_transition,
    do_set_step_state,
    do_set_transition_state,
)
from controlplane.core.transitions.steps import StepDetail
from tests.controlplane.factories import PlanFactory, TaskFactory


def test_transition_detail_has_steps_with_timestamps(db: None, viewer_client: APIClient) -> None:
    task = TaskFactory(epoch=2)
    transition = do_create_transition(
        PlanFactory(), task, ["stop_workers", "migrate_state", "start_workers"], 8, 4
    )
    do_set_transition_state(transition, TransitionState.RUNNING)
    first = transition.steps.get(order=0)
    do_set_step_state(first, StepState.RUNNING)
    do_set_step_state(first, StepState.DONE, StepDetail(commands=["c-1"]))

    body = viewer_client.get(f"/api/v1/transitions/{transition.pk}/").json()

    assert body["epoch"] == 3
    assert body["state"] == "running"
    assert [s["name"] for s in body["steps"]] == ["stop_workers", "migrate_state", "start_workers"]
    assert body["steps"][0]["state"] == "done"
    assert body["steps"][0]["started_at"] is not None
    assert body["steps"][0]["finished_at"] is not None
    assert body["steps"][1]["started_at"] is None
