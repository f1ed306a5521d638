from __future__ import annotations

from rest_framework.test import APIClient

from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.fleet.selectors import verify_node_token
from controlplane.apps.fleet.tokens import hash_node_token


def test_registering_a_node_returns_its_token_once(client_for) -> None:  # type: ignore[no-untyped-def]
    admin: APIClient = client_for("admin")
    body = {
        "name": "gpu-17",
        "address": "10.1.0.17",
        "devices": [{"index": i, "kind": "h100-80g", "memory_bytes": 80 * 10**9} for i in range(8)],
    }

    response = admin.post("/api/v1/nodes/", body, format="json")

    assert response.status_code == 201
    token = response.json()["token"]
    node = Node.objects.get(name="gpu-17")
    assert node.token_hash == hash_node_token(token)
    assert token not in node.token_hash
    assert Device.objects.filter(node=node).count() == 8
    detail = admin.get(f"/api/v1/nodes/{node.pk}/").json()
    assert "token" not in detail
    assert "token_hash" not in detail


def test_verify_node_token_accepts_only_the_nodes_own_token(client_for) -> None:  # type: ignore[no-untyped-def]
    admin: APIClient = client_for("admin")
    token_a = admin.post("/api/v1/nodes/", {"name": "a"}, format="json").json()["token"]
    token_b = admin.post("/api/v1/nodes/", {"name": "b"}, format="json").json()["token"]

    node_a = verify_node_token("a", token_a)
    assert node_a is not None
    assert node_a.name == "a"
    assert verify_node_token("a", token_b) is None  # a token speaks only for its own node
    assert verify_node_token("a", token_a + "x") is None
    assert verify_node_token("nobody", token_a) is None


def test_duplicate_node_name_is_a_field_error(client_for) -> None:  # type: ignore[no-untyped-def]
    admin: APIClient = client_for("admin")
    admin.post("/api/v1/nodes/", {"name": "a"}, format="json")

    response = admin.post("/api/v1/nodes/", {"name": "a"}, format="json")

    assert response.status_code == 400
    assert "name" in response.json()
    assert Node.objects.filter(name="a").count() == 1
