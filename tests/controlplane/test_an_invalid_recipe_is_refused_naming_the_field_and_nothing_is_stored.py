from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from controlplane.apps.accounts.models import AuditEntry
from controlplane.apps.fleet.models import Node
from controlplane.apps.training.models import TrainingTask


def valid() -> dict[str, Any]:
    return {
        "version": 1,
        "model": {
            "num_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "seq_length": 32,
            "vocab_size": 2048,
        },
        "data": {
            "tokenizer": "/shared/tok/tokenizer.json",
            "blend": [{"path_prefix": "/shared/data/pydoc", "weight": 1.0}],
            "split": "98,2,0",
        },
        "schedule": {"lr": 3e-3, "min_lr": 3e-4, "warmup_iterations": 20},
        "checkpoint": {"directory": "/shared/ckpt/tiny", "interval": 100},
        "eval": {"interval": 50, "iterations": 4},
        "train_iterations": 500,
        "global_batch_size": 8,
        "micro_batch_size": 2,
    }


Edit = Callable[[dict[str, Any]], Any]


def put(path: str, value: Any) -> Edit:
    def edit(r: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = r
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[last] = value

    return edit


def drop(path: str) -> Edit:
    def edit(r: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = r
        for p in parents:
            node = node[p]
        del node[last]

    return edit


CASES: list[tuple[str, Edit, str]] = [
    ("no version", drop("version"), "recipe.version"),
    ("a future version", put("version", 2), "recipe.version"),
    ("no model", drop("model"), "recipe.model"),
    ("zero layers", put("model.num_layers", 0), "recipe.model.num_layers"),
    ("layers as a string", put("model.num_layers", "2"), "recipe.model.num_layers"),
    (
        "heads that do not divide hidden",
        put("model.num_attention_heads", 5),
        "recipe.model.num_attention_heads",
    ),
    (
        "query groups that do not divide heads",
        put("model.num_query_groups", 3),
        "recipe.model.num_query_groups",
    ),
    ("an unknown activation", put("model.activation", "relu"), "recipe.model.activation"),
    ("an unknown model field", put("model.layers", 2), "recipe.model.layers"),
    (
        "rope with an odd head size",
        lambda r: r["model"].update(hidden_size=12, num_attention_heads=4, position_embedding="rope"),
        "recipe.model.position_embedding",
    ),
    ("dropout of one", put("model.hidden_dropout", 1.0), "recipe.model.hidden_dropout"),
    ("a provider that is no import path", put("model.provider", "not a path"), "recipe.model.provider"),
    ("no vocabulary size", drop("model.vocab_size"), "recipe.model.vocab_size"),
    ("no tokenizer", drop("data.tokenizer"), "recipe.data.tokenizer"),
    ("a blend without a split", drop("data.split"), "recipe.data.split"),
    ("a split of two numbers", put("data.split", "98,2"), "recipe.data.split"),
    (
        "a blend prefix ending in .bin",
        put("data.blend.0.path_prefix", "/d/x.bin"),
        "recipe.data.blend.0.path_prefix",
    ),
    ("a zero blend weight", put("data.blend.0.weight", 0), "recipe.data.blend.0.weight"),
    ("no learning rate", drop("schedule.lr"), "recipe.schedule.lr"),
    ("min_lr above lr", put("schedule.min_lr", 1.0), "recipe.schedule.min_lr"),
    (
        "warmup as long as the run",
        put("schedule.warmup_iterations", 500),
        "recipe.schedule.warmup_iterations",
    ),
    ("an unknown decay style", put("schedule.decay_style", "step"), "recipe.schedule.decay_style"),
    ("an unknown optimizer", put("optimizer", {"name": "sgd"}), "recipe.optimizer.name"),
    ("a beta of one", put("optimizer", {"beta2": 1.0}), "recipe.optimizer.beta2"),
    ("a zero checkpoint interval", put("checkpoint.interval", 0), "recipe.checkpoint.interval"),
    ("a checkpoint without a directory", drop("checkpoint.directory"), "recipe.checkpoint.directory"),
    ("eval without validation data", put("data.split", "100,0,0"), "recipe.eval"),
    ("micro batch not dividing global", put("micro_batch_size", 3), "recipe.micro_batch_size"),
    ("both iterations and tokens", put("train_tokens", 1000), "recipe.train_tokens"),
    ("neither iterations nor tokens", drop("train_iterations"), "recipe.train_iterations"),
    ("an unknown section", put("tokenizer", "x"), "recipe.tokenizer"),
    ("a recipe that is a list", lambda r: [r], "recipe"),
    ("YAML that does not parse", lambda r: "version: 1\nmodel: [\n", "recipe"),
    ("YAML with aliases", lambda r: "a: &x [1, 2]\nb: [*x, *x]\n", "recipe"),
    ("recipe text too long", lambda r: "#" * (256 * 1024 + 1), "recipe"),
]


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
