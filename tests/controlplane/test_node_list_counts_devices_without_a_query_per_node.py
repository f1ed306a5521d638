"""Listing nodes costs the same number of queries for 2 nodes as for 12 (device counts are annotated)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from tests.controlplane.factories import NodeFactory


def queries_for_node_list(client: APIClient) -> tuple[int, list[Any]]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get("/api/v1/nodes/")
    assert response.status_code == 200
    return len(ctx.captured_queries), response.json()["results"]


@pytest.mark.django_db
def test_node_list_query_count_does_not_grow_with_nodes(viewer_client: APIClient) -> None:
    NodeFactory.create_batch(2, devices=3)
    few, results = queries_for_node_list(viewer_client)
    assert sorted(n["device_count"] for n in results) == [3, 3]

    NodeFactory.create_batch(10, devices=1)
    many, results = queries_for_node_list(viewer_client)

    assert many == few
    assert sum(n["device_count"] for n in results) == 2 * 3 + 10
