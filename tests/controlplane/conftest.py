"""Django fixtures for the control-plane tests (tests/core runs without Django, so not in tests/)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from controlplane.apps.accounts.roles import Role
from controlplane.apps.accounts.services import do_set_user_role
from controlplane.apps.fleet.models import Node
from tests.controlplane.factories import NodeFactory, UserFactory

PRINCIPALS = ("anonymous", "viewer", "operator", "admin", "agent")
NODE_TOKEN = "unode_test-agent-token"


def make_user(role: Role | None, username: str | None = None) -> User:
    user = UserFactory(username=username) if username else UserFactory()
    if role is not None:
        do_set_user_role(None, user, role)
    return user


@pytest.fixture
def cluster(db: None) -> list[Node]:
    """Two healthy nodes of eight 80 GB H100s each (16 devices)."""
    return [NodeFactory(devices=8), NodeFactory(devices=8)]


@pytest.fixture
def client_for(db: None) -> Callable[[str], APIClient]:
    """An API client for a principal: anonymous, no-role (a user without a role), viewer, operator,
    admin, or agent (a node agent's token)."""

    def make(principal: str) -> APIClient:
        client = APIClient()
        if principal == "anonymous":
            return client
        if principal == "agent":
            from controlplane.apps.fleet.tokens import hash_node_token

            NodeFactory(name="agent-node", token_hash=hash_node_token(NODE_TOKEN))
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {NODE_TOKEN}")
            return client
        client.force_authenticate(make_user(None if principal == "no-role" else Role(principal)))
        return client

    return make


@pytest.fixture
def operator_client(client_for: Callable[[str], APIClient]) -> APIClient:
    return client_for("operator")


@pytest.fixture
def viewer_client(client_for: Callable[[str], APIClient]) -> APIClient:
    return client_for("viewer")


@pytest.fixture(autouse=True)
def _fresh_heartbeat_times() -> Iterator[None]:
    """Heartbeat times live in Redis (``fleet.last_seen``), which no test transaction rolls back: each test
    starts without the entries of earlier ones (node ids are reused across test databases)."""
    from controlplane.apps.fleet import last_seen

    def clear() -> None:
        with contextlib.suppress(Exception):
            last_seen.liveness_redis().delete(*last_seen.LIVENESS_KEYS)

    clear()
    yield
    clear()
