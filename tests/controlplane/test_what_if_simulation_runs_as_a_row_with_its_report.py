"""A what-if simulation of the live cluster is a stored run: queued, executed by the job, report kept."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from celery import current_app
from rest_framework.test import APIClient

from controlplane.apps.fleet.models import Node
from controlplane.apps.simulations.models import RunState, SimulationRun
from controlplane.apps.simulations.services import do_run_simulation
from tests.controlplane.task_specs import valid_spec


@pytest.fixture
def submitted_tasks(cluster: list[Node], operator_client: APIClient) -> None:
    for name, weight in (("alpha", 1.0), ("beta", 2.0)):
        response = operator_client.post("/api/v1/tasks/", valid_spec(name=name, weight=weight), format="json")
        assert response.status_code == 201, response.json()


@pytest.mark.django_db(transaction=True)
def test_operator_queues_a_run_and_the_job_stores_the_report(
    submitted_tasks: None, operator_client: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    queued: list[tuple[str, list[int]]] = []
    monkeypatch.setattr(current_app, "send_task", lambda name, args: queued.append((name, args)))

    response = operator_client.post("/api/v1/simulations/", {"trace": "trace-b", "days": 1}, format="json")

    assert response.status_code == 202, response.json()
    run_id = response.json()["id"]
    assert queued == [("simulations.run_simulation", [run_id])]  # enqueued after commit, by id
    run = SimulationRun.objects.get(pk=run_id)
    assert run.state == RunState.QUEUED
    assert run.cluster == {"nodes": 2, "gpus_per_node": 8, "device_kind": "h100-80g"}
    assert [t["name"] for t in run.tasks] == ["alpha", "beta"]

    do_run_simulation(run_id)

    detail = operator_client.get(f"/api/v1/simulations/{run_id}/").json()
    assert detail["state"] == "succeeded", detail["error"]
    assert detail["progress"] == 1.0
    assert set(detail["ratios"]) >= {"unicron", "checkpoint-restart"}
    assert detail["ratios"]["checkpoint-restart"] == pytest.approx(1.0)
    assert detail["report"]["trace"]["name"] == "trace-b"


@pytest.mark.django_db(transaction=True)
def test_a_run_is_claimed_once(
    submitted_tasks: None, operator_client: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(current_app, "send_task", lambda name, args: None)
    run_id = operator_client.post(
        "/api/v1/simulations/", {"trace": "trace-a", "days": 0.5}, format="json"
    ).json()["id"]
    do_run_simulation(run_id)

    from controlplane.apps.common.errors import StaleState

    with pytest.raises(StaleState):
        do_run_simulation(run_id)  # a redelivered message finds the run no longer queued


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"trace": "trace-z", "days": 1}, "trace"),
        ({"trace": "trace-a", "days": 0}, "days"),
        ({"trace": "trace-a", "days": 1, "nodes": 3}, "nodes"),
    ],
)
def test_bad_requests_are_refused_and_store_nothing(
    submitted_tasks: None, operator_client: APIClient, body: dict[str, object], field: str
) -> None:
    response = operator_client.post("/api/v1/simulations/", body, format="json")
    assert response.status_code == 400
    assert field in str(response.json())
    assert SimulationRun.objects.count() == 0


def test_an_empty_cluster_cannot_be_simulated(client_for: Callable[[str], APIClient]) -> None:
    response = client_for("operator").post("/api/v1/simulations/", {"trace": "trace-a"}, format="json")
    assert response.status_code == 400
    assert "no usable nodes" in str(response.json())
    assert SimulationRun.objects.count() == 0


def test_a_viewer_cannot_start_a_run(submitted_tasks: None, client_for: Callable[[str], APIClient]) -> None:
    response = client_for("viewer").post("/api/v1/simulations/", {"trace": "trace-a"}, format="json")
    assert response.status_code == 403
