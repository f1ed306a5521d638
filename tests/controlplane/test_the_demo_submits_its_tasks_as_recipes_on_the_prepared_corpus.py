"""`make demo` trains on real text by default: its tasks go through the REST API as training recipes
whose data section names the prepared corpus and its tokenizer (controlplane.config.demo_scenario)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rest_framework.test import APIClient

from controlplane.apps.fleet.models import Node
from controlplane.apps.training.models import TrainingTask
from controlplane.config.demo_scenario import (
    DEMO_VOCAB,
    TINY_GPT,
    Api,
    ApiError,
    DemoData,
    demo_tasks,
    submit_demo_tasks,
)


class ClientApi(Api):
    """The demo's API client, answered by the test client instead of a running server."""

    def __init__(self, client: APIClient) -> None:
        super().__init__("", "")
        self.client = client

    def call(self, method: str, path: str, body: Any = None) -> Any:
        if body is None:
            response = self.client.get(f"/api/v1/{path}")
        else:
            response = self.client.post(f"/api/v1/{path}", body, format="json")
        if response.status_code >= 400:
            raise ApiError(f"{method} {path}: HTTP {response.status_code} {response.content.decode()}")
        return response.json()


def test_the_demo_tasks_are_recipes_on_the_corpus(
    cluster: list[Node], operator_client: APIClient, tmp_path: Path
) -> None:
    data = DemoData(
        prefix=str(tmp_path / "pydoc" / "pydoc"),
        tokenizer=str(tmp_path / "pydoc" / "tokenizer.json"),
        vocab=DEMO_VOCAB,
        checkpoints=str(tmp_path / "checkpoints"),
    )
    made = submit_demo_tasks(ClientApi(operator_client), 8, data)

    assert [t["name"] for t in made] == [t["name"] for t in demo_tasks(8)]
    for t in TrainingTask.objects.order_by("pk"):
        recipe = t.recipe
        assert recipe["data"]["blend"] == [{"path_prefix": data.prefix, "weight": 1.0}]
        assert recipe["data"]["tokenizer"] == data.tokenizer
        assert Path(recipe["checkpoint"]["directory"]).parent == Path(data.checkpoints)
        assert Path(recipe["checkpoint"]["directory"]).name.startswith(f"{t.name}-")
        assert recipe["checkpoint"]["keep"] == 2
        assert recipe["eval"]["interval"] == 50
        assert (t.vocab_size, t.num_layers, t.hidden_size) == (
            DEMO_VOCAB,
            TINY_GPT["num_layers"],
            TINY_GPT["hidden_size"],
        )
    # a restarted demo submits nothing twice
    assert submit_demo_tasks(ClientApi(operator_client), 8, data) == []


def test_synthetic_demo_tasks_stay_bare_shapes(cluster: list[Node], operator_client: APIClient) -> None:
    submit_demo_tasks(ClientApi(operator_client), 4, None)

    tasks = list(TrainingTask.objects.all())
    assert len(tasks) == 3
    assert all(t.vocab_size == TINY_GPT["vocab_size"] for t in tasks)
    assert all(not (t.recipe.get("data") or {}).get("blend") for t in tasks), [t.recipe for t in tasks]
