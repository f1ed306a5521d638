"""``GET /api/v1/device-map/`` gives the dashboard's map every node and device with the task holding it, in
one response and a fixed number of queries whatever the fleet size (the paged lists stop at a page cap)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from controlplane.apps.training.models import Allocation
from tests.controlplane.factories import NodeFactory, TaskFactory


def _fleet(nodes: int) -> None:
    made = [NodeFactory(devices=8) for _ in range(nodes)]
    task = TaskFactory(state="running")
    for rank, device in enumerate(made[0].devices.order_by("index")[:4]):
        Allocation.objects.create(task=task, device=device, rank=rank, epoch=1)


def _get(client: APIClient) -> tuple[dict[str, Any], int]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/api/v1/device-map/")
    assert response.status_code == 200, response.content
    return response.json(), len(queries)


@pytest.mark.django_db
def test_device_map_returns_the_whole_fleet_in_constant_queries(
    viewer_client: APIClient, client_for: Any
) -> None:
    _fleet(3)
    _small, small_queries = _get(viewer_client)
    _fleet(150)  # 1,224 devices: more than any page of /devices/
    big, big_queries = _get(viewer_client)
    assert big_queries == small_queries
    assert len(big["nodes"]) == 153
    assert len(big["devices"]) == 153 * 8
    held = [d for d in big["devices"] if d[5] is not None]
    assert len(held) == 8  # four ranks of each of the two tasks
    assert sorted(d[6] for d in held) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert {t[2] for t in big["tasks"]} == {"running"}
    assert big["task_states"] == {"running": 2}
    node_ids = {n[0] for n in big["nodes"]}
    assert all(d[1] in node_ids for d in big["devices"])
    assert client_for("anonymous").get("/api/v1/device-map/").status_code in (401, 403)
