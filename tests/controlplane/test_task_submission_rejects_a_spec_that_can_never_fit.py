"""A task that can never run on this cluster is refused at submission (docs/ARCHITECTURE.md §8), using the
planning core's feasibility model (x_min)."""

from __future__ import annotations

from rest_framework.test import APIClient

from controlplane.apps.fleet.models import Node
from tests.controlplane.task_specs import assert_nothing_stored, valid_spec


def test_more_devices_than_the_cluster_has(cluster: list[Node], operator_client: APIClient) -> None:
    response = operator_client.post(
        "/api/v1/tasks/", valid_spec(min_workers=32, max_workers=64), format="json"
    )

    assert response.status_code == 400
    assert "16" in response.json()["min_workers"][0]
    assert_nothing_stored()


def test_a_model_too_big_for_device_memory_at_max_workers(
    cluster: list[Node], operator_client: APIClient
) -> None:
    # ~175 B parameters need ~2.8 TB of model state: more than 8 x 80 GB can hold
    gpt3 = valid_spec(
        num_layers=96,
        hidden_size=12288,
        num_attention_heads=96,
        seq_length=2048,
        vocab_size=51200,
        global_batch_size=1536,
        micro_batch_size=1,
        max_workers=8,
    )

    response = operator_client.post("/api/v1/tasks/", gpt3, format="json")

    assert response.status_code == 400
    assert "max_workers" in response.json()
    assert_nothing_stored()


def test_a_model_needing_more_devices_than_exist(cluster: list[Node], operator_client: APIClient) -> None:
    # the same model fits on enough devices (max_workers 1024), but x_min is above the cluster's 16
    gpt3 = valid_spec(
        num_layers=96,
        hidden_size=12288,
        num_attention_heads=96,
        seq_length=2048,
        vocab_size=51200,
        global_batch_size=1536,
        micro_batch_size=1,
        max_workers=1024,
    )

    response = operator_client.post("/api/v1/tasks/", gpt3, format="json")

    assert response.status_code == 400
    assert "needs at least" in response.json()["min_workers"][0]
    assert_nothing_stored()


def test_an_empty_cluster_fits_nothing(db: None, operator_client: APIClient) -> None:
    response = operator_client.post("/api/v1/tasks/", valid_spec(), format="json")

    assert response.status_code == 400
    assert "min_workers" in response.json()
    assert_nothing_stored()
