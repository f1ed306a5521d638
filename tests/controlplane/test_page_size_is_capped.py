"""A list's page size is capped (UNICRON_API_MAX_PAGE_SIZE): ?limit=10**12 used to return whole tables
and ?limit=10**23 a 500. A huge limit is clamped, a huge offset is a 400, and neither is a 500."""

from __future__ import annotations

import pytest
from pytest_django.fixtures import SettingsWrapper
from rest_framework.test import APIClient

from controlplane.apps.common.pagination import MAX_OFFSET
from tests.controlplane.factories import NodeFactory


@pytest.fixture
def seven_nodes(db: None, settings: SettingsWrapper) -> None:
    settings.UNICRON_API_MAX_PAGE_SIZE = 5
    for _ in range(7):
        NodeFactory()


@pytest.mark.parametrize("limit", [str(10**12), str(10**23), "5", "9" * 5000])
def test_a_huge_limit_is_clamped_to_the_maximum(
    seven_nodes: None, viewer_client: APIClient, limit: str
) -> None:
    response = viewer_client.get("/api/v1/nodes/", {"limit": limit})

    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 7
    assert len(body["results"]) <= 5
    assert len(body["results"]) == 5 or limit == "9" * 5000  # unparseable: the default page size


def test_a_huge_offset_is_a_400_naming_the_parameter(seven_nodes: None, viewer_client: APIClient) -> None:
    response = viewer_client.get("/api/v1/nodes/", {"offset": str(10**23)})

    assert response.status_code == 400
    assert "offset" in response.json()


def test_the_largest_offset_is_an_empty_page(seven_nodes: None, viewer_client: APIClient) -> None:
    response = viewer_client.get("/api/v1/nodes/", {"offset": str(MAX_OFFSET), "limit": str(10**23)})

    assert response.status_code == 200
    assert response.json()["results"] == []


def test_the_schema_documents_the_maximum(seven_nodes: None, viewer_client: APIClient) -> None:
    schema = viewer_client.get("/api/schema/", {"format": "json"}).json()

    limit = next(p for p in schema["paths"]["/api/v1/nodes/"]["get"]["parameters"] if p["name"] == "limit")
    assert limit["schema"]["maximum"] == 5
