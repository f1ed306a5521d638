"""A request whose transaction PostgreSQL aborts for a deadlock (seen in ``make demo``: a fault drill's
command insert against a concurrent task update) gets a 503 that says to send it again, with Retry-After,
and leaves nothing behind — not a 500."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import OperationalError
from psycopg import errors as pg_errors
from rest_framework.test import APIClient

from controlplane.apps.fleet import services as fleet_services
from controlplane.apps.fleet.models import AgentCommand, Device
from controlplane.apps.training.models import Allocation
from tests.controlplane.factories import NodeFactory, TaskFactory


def _drill(client: APIClient) -> object:
    """A crash drill on rank 0 of a running task (a valid request)."""
    node = NodeFactory(devices=2)
    task = TaskFactory(state="running", epoch=1)
    for rank, device in enumerate(Device.objects.filter(node=node).order_by("index")):
        Allocation.objects.create(task=task, device=device, rank=rank, dp_rank=rank, epoch=1)
    body = {"fault": "crash", "task": task.pk, "rank": 0}
    return client.post(f"/api/v1/nodes/{node.pk}/inject-fault/", body, format="json")


def _deadlock(*args: object, **kwargs: object) -> None:
    try:
        raise pg_errors.DeadlockDetected("deadlock detected")
    except pg_errors.DeadlockDetected as exc:
        raise OperationalError("deadlock detected") from exc  # how Django surfaces it


def test_a_deadlocked_drill_is_rolled_back_and_answered_503(
    db: None, operator_client: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the command row is written, then the transaction dies (as it did at COMMIT in the demo)
    monkeypatch.setattr(fleet_services, "do_record_audit", _deadlock)

    response: Any = _drill(operator_client)

    assert response.status_code == 503, response.content
    assert response["Retry-After"] == "1"
    body = response.json()
    assert body["code"] == "retry"
    assert "deadlock" in body["detail"]
    assert "nothing was changed" in body["detail"]
    assert not AgentCommand.objects.exists()


def test_other_database_errors_are_not_disguised_as_retryable(
    db: None, operator_client: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise OperationalError("the server closed the connection")

    monkeypatch.setattr(fleet_services, "do_record_audit", broken)
    operator_client.raise_request_exception = False
    response: Any = _drill(operator_client)
    # a lost connection is a database outage: a 503, but not one that says the request may be sent again
    assert response.status_code == 503
    assert response.json()["code"] == "store_unavailable"
    assert not AgentCommand.objects.exists()
