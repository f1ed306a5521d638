from __future__ import annotations

from rest_framework.test import APIClient

from controlplane.apps.fleet.models import Node
from tests.controlplane.task_specs import assert_nothing_stored, valid_spec


def test_task_submission_rejects_unknown_fields(cluster: list[Node], operator_client: APIClient) -> None:
    response = operator_client.post("/api/v1/tasks/", valid_spec(num_layerz=4), format="json")

    assert response.status_code == 400
    assert response.json() == {"num_layerz": ["Unknown field."]}
    assert_nothing_stored()


def test_task_submission_rejects_read_only_fields(cluster: list[Node], operator_client: APIClient) -> None:
    response = operator_client.post("/api/v1/tasks/", valid_spec(state="running", epoch=7), format="json")

    assert response.status_code == 400
    assert set(response.json()) == {"state", "epoch"}
    assert_nothing_stored()
