from __future__ import annotations

from rest_framework.test import APIClient

from controlplane.apps.fleet.models import Node
from tests.controlplane.task_specs import assert_nothing_stored, valid_spec


def test_task_submission_rejects_global_batch_not_multiple_of_micro_batch(
    cluster: list[Node], operator_client: APIClient
) -> None:
    response = operator_client.post("/api/v1/tasks/", valid_spec(global_batch_size=30), format="json")

    assert response.status_code == 400
    assert "global_batch_size" in response.json()
    assert_nothing_stored()
