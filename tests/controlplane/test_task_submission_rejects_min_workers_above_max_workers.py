from __future__ import annotations

from rest_framework.test import APIClient

from controlplane.apps.fleet.models import Node
from tests.controlplane.task_specs import assert_nothing_stored, valid_spec


def test_task_submission_rejects_min_workers_above_max_workers(
    cluster: list[Node], operator_client: APIClient
) -> None:
    response = operator_client.post("/api/v1/tasks/", valid_spec(min_workers=8, max_workers=4), format="json")

    assert response.status_code == 400
    assert "max_workers" in response.json()
    assert_nothing_stored()
