from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from rest_framework.test import APIClient

from controlplane.apps.fleet.models import Node
from controlplane.apps.training.models import TrainingTask
from controlplane.core.recipe import load_recipe

EXAMPLE = Path(__file__).resolve().parents[2] / "agents" / "data" / "recipes" / "tiny-gpt.yaml"


def example_recipe() -> dict[str, Any]:
    recipe: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    recipe["model"]["vocab_size"] = 2048
    recipe["optimizer"]["eps"] = 1e-8  # PyYAML 1.1 reads 1e-8 as a string
    recipe["schedule"]["lr"], recipe["schedule"]["min_lr"] = 3e-3, 3e-4
    return recipe


def test_a_json_recipe_becomes_the_tasks_recipe_and_model_shape(
    cluster: list[Node], operator_client: APIClient
) -> None:
    recipe = example_recipe()
    response = operator_client.post("/api/v1/tasks/", {"name": "tiny", "recipe": recipe}, format="json")

    assert response.status_code == 201, response.json()
    task = TrainingTask.objects.get(pk=response.json()["id"])
    assert (task.num_layers, task.hidden_size, task.num_attention_heads, task.seq_length) == (2, 64, 4, 32)
    assert (task.vocab_size, task.global_batch_size, task.micro_batch_size) == (2048, 8, 2)
    assert task.total_iterations == 500
    assert task.recipe["data"]["split"] == "98,2,0"
    detail = operator_client.get(f"/api/v1/tasks/{task.pk}/").json()
    assert detail["recipe"] == task.recipe
    assert load_recipe(EXAMPLE.read_text()).model_dump(exclude={"model"}) == load_recipe(
        yaml.safe_dump(task.recipe)
    ).model_dump(exclude={"model"})


def test_yaml_recipe_text_is_accepted(cluster: list[Node], operator_client: APIClient) -> None:
    text = EXAMPLE.read_text().replace("  seq_length: 32\n", "  seq_length: 32\n  vocab_size: 2048\n")
    response = operator_client.post("/api/v1/tasks/", {"name": "tiny", "recipe": text}, format="json")

    assert response.status_code == 201, response.json()
    assert response.json()["recipe"]["schedule"]["lr"] == 3e-3


def test_a_shape_submission_gets_a_synthetic_data_recipe(
    cluster: list[Node], operator_client: APIClient
) -> None:
    shape = {
        "name": "shape",
        "num_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "seq_length": 32,
        "vocab_size": 128,
        "global_batch_size": 8,
        "micro_batch_size": 2,
        "total_iterations": 40,
    }
    response = operator_client.post("/api/v1/tasks/", shape, format="json")

    assert response.status_code == 201, response.json()
    recipe = response.json()["recipe"]
    assert "data" not in recipe
    assert recipe["model"]["vocab_size"] == 128
    assert recipe["train_iterations"] == 40
    load_recipe(yaml.safe_dump(recipe))


def test_grouped_query_attention_and_swiglu_change_the_memory_the_fit_check_uses(
    cluster: list[Node], operator_client: APIClient
) -> None:
    recipe = example_recipe()
    recipe["model"].update(hidden_size=4096, num_attention_heads=32, num_query_groups=32, num_layers=8)
    plain = operator_client.post("/api/v1/tasks/", {"name": "a", "recipe": recipe}, format="json")
    recipe["model"].update(activation="swiglu", ffn_hidden_size=4096 * 16, untie_embeddings=True)
    wider = operator_client.post("/api/v1/tasks/", {"name": "b", "recipe": recipe}, format="json")

    assert plain.status_code == 201, plain.json()
    assert wider.status_code == 400, wider.json()
    assert not TrainingTask.objects.filter(name="b").exists()
