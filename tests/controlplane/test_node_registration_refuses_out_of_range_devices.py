"""Registering a node with a device index or memory outside its database column (integer, bigint) is a
400 naming the field, not a 500, and registers nothing."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from controlplane.apps.fleet.models import Device, Node


def _register(client: APIClient, **device: Any) -> Any:
    spec = {"index": 0, "kind": "h100-80g", "memory_bytes": 80 * 10**9, **device}
    return client.post("/api/v1/nodes/", {"name": "gpu-1", "devices": [spec]}, format="json")


@pytest.mark.parametrize(
    ("field", "value"),
    [("index", 2**31), ("index", 10**30), ("index", -1), ("memory_bytes", 2**63), ("memory_bytes", 0)],
)
def test_an_out_of_range_device_is_refused(client_for: Any, field: str, value: int) -> None:
    response = _register(client_for("admin"), **{field: value})

    assert response.status_code == 400
    assert field in str(response.json()["devices"])
    assert not Node.objects.filter(name="gpu-1").exists()
    assert not Device.objects.exists()


def test_the_largest_values_the_columns_hold_are_accepted(client_for: Any) -> None:
    response = _register(client_for("admin"), index=2**31 - 1, memory_bytes=2**63 - 1)

    assert response.status_code == 201, response.json()
    assert Device.objects.get().memory_bytes == 2**63 - 1


def test_repeated_device_indexes_are_refused(client_for: Any) -> None:
    spec = {"index": 3, "kind": "h100-80g", "memory_bytes": 80 * 10**9}
    response = client_for("admin").post(
        "/api/v1/nodes/", {"name": "gpu-1", "devices": [spec, spec]}, format="json"
    )

    assert response.status_code == 400
    assert "repeated: [3]" in str(response.json()["devices"])
    assert not Node.objects.exists()
