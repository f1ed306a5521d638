from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from controlplane.apps.accounts.models import AuditEntry
from controlplane.apps.fleet.models import Node
from controlplane.apps.training.models import TrainingTask
from tests.controlplane.recipe_cases import CASES, Edit, answer, valid


@pytest.mark.parametrize(("edit", "field"), [pytest.param(e, f, id=n) for n, e, f in CASES])
def test_an_invalid_recipe_is_refused_naming_the_field(
    cluster: list[Node], operator_client: APIClient, edit: Edit, field: str
) -> None:
    recipe = valid()
    replaced = edit(recipe)
    document = recipe if replaced is None else replaced

    response = operator_client.post("/api/v1/tasks/", {"name": "bad", "recipe": document}, format="json")

    assert response.status_code == 400, response.json()
    assert field in response.json(), response.json()
    assert answer(document) == (400, response.json())  # as tools/recipe_errors.py prints it
    assert not TrainingTask.objects.exists()
    assert not AuditEntry.objects.filter(verb="submit_task").exists()


def test_shape_fields_next_to_a_recipe_are_refused(cluster: list[Node], operator_client: APIClient) -> None:
    body = {"name": "both", "recipe": valid(), "num_layers": 4}

    response = operator_client.post("/api/v1/tasks/", body, format="json")

    assert response.status_code == 400
    assert "num_layers" in response.json()
    assert not TrainingTask.objects.exists()


def test_the_valid_recipe_of_these_cases_is_accepted(cluster: list[Node], operator_client: APIClient) -> None:
    response = operator_client.post("/api/v1/tasks/", {"name": "good", "recipe": valid()}, format="json")

    assert response.status_code == 201, response.json()
