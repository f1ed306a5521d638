from __future__ import annotations

from typing import Any

from rest_framework.test import APIClient

from controlplane.apps.accounts.models import AuditEntry
from controlplane.apps.fleet.models import Node
from controlplane.apps.training.models import TrainingTask

SPEC: dict[str, Any] = {
    "name": "gpt-small",
    "num_layers": 4,
    "hidden_size": 256,
    "num_attention_heads": 8,
    "seq_length": 512,
    "vocab_size": 32000,
    "global_batch_size": 32,
    "micro_batch_size": 4,
    "weight": 2.5,
    "min_workers": 1,
    "max_workers": 8,
}


def test_operator_submits_a_task(cluster: list[Node], operator_client: APIClient) -> None:
    response = operator_client.post("/api/v1/tasks/", SPEC, format="json")

    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["state"] == "pending"
    assert body["weight"] == 2.5
    task = TrainingTask.objects.get(pk=body["id"])
    assert task.owner is not None
    assert body["owner"] == task.owner.username
    assert AuditEntry.objects.filter(verb="submit_task", object_id=str(task.pk)).exists()
