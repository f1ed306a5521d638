"""GET /api/v1/devices/?nodes=1,2,... lists the devices of those nodes in one request (the dashboard's
Nodes page reads the devices of the page of nodes it shows this way); ids that are not positive integers
are refused with 400 naming the field."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.controlplane.factories import NodeFactory


@pytest.mark.django_db
def test_devices_of_the_listed_nodes_only(viewer_client: APIClient) -> None:
    first, second, other = NodeFactory(devices=3), NodeFactory(devices=2), NodeFactory(devices=4)

    body = viewer_client.get("/api/v1/devices/", {"nodes": f"{first.pk},{second.pk}", "limit": 1000}).json()

    assert body["count"] == 5
    assert {(d["node"], d["index"]) for d in body["results"]} == {
        *((first.pk, i) for i in range(3)),
        *((second.pk, i) for i in range(2)),
    }
    assert other.pk not in {d["node"] for d in body["results"]}


@pytest.mark.django_db
def test_one_node_and_an_unknown_node(viewer_client: APIClient) -> None:
    node = NodeFactory(devices=2)

    assert viewer_client.get("/api/v1/devices/", {"nodes": str(node.pk)}).json()["count"] == 2
    assert viewer_client.get("/api/v1/devices/", {"nodes": str(node.pk + 1000)}).json()["count"] == 0
    largest = viewer_client.get("/api/v1/devices/", {"nodes": str(2**63 - 1)})
    assert (largest.status_code, largest.json()["count"]) == (200, 0)


@pytest.mark.django_db
@pytest.mark.parametrize("bad", ["abc", "1,abc", "1.5", "-3", "0", str(2**63)])
def test_an_id_that_is_not_a_positive_integer_is_a_400_naming_the_field(
    viewer_client: APIClient, bad: str
) -> None:
    NodeFactory(devices=1)

    response = viewer_client.get("/api/v1/devices/", {"nodes": bad})

    assert response.status_code == 400, response.content
    assert list(response.json()) == ["nodes"]
