"""Fleet queries."""

from __future__ import annotations

from django.db.models import Count, QuerySet

from controlplane.apps.fleet.choices import CommandState
from controlplane.apps.fleet.models import AgentCommand, Device, Node
from controlplane.apps.fleet.tokens import hash_node_token, token_matches


def verify_node_token(node_name: str, token: str) -> Node | None:
    """The node ``node_name`` if ``token`` is its agent token, else None (constant-time hash compare)."""
    node = Node.objects.filter(name=node_name).first()
    if node is None or not node.token_hash:
        # compare anyway so a missing node costs the same as a wrong token
        token_matches(token, "0" * 64)
        return None
    return node if token_matches(token, node.token_hash) else None


def get_node_for_token(token: str) -> Node | None:
    """The node whose agent token is ``token`` (looked up by its SHA-256: the agent link knows only the
    token when the socket opens). A rotated token no longer matches any node."""
    if not token:
        return None
    return Node.objects.filter(token_hash=hash_node_token(token)).first()


def list_nodes() -> QuerySet[Node]:
    """Nodes with ``device_count`` annotated (one query for a page, not one per node)."""
    return Node.objects.annotate(device_count=Count("devices"))


def list_devices() -> QuerySet[Device]:
    return Device.objects.select_related("node")


def list_pending_commands(node: Node) -> QuerySet[AgentCommand]:
    return AgentCommand.objects.filter(node=node, state=CommandState.PENDING).order_by("created_at", "id")
