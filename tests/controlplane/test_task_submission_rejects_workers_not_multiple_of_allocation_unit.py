from __future__ import annotations

from rest_framework.test import APIClient

from controlplane.apps.fleet.models import Node
from tests.controlplane.task_specs import assert_nothing_stored, valid_spec


def test_task_submission_rejects_workers_not_multiple_of_allocation_unit(
    cluster: list[Node], operator_client: APIClient
) -> None:
    response = operator_client.post(
        "/api/v1/tasks/", valid_spec(allocation_unit=8, min_workers=4, max_workers=16), format="json"
    )

    assert response.status_code == 400
    assert "allocation_unit" in response.json()
    assert_nothing_stored()
