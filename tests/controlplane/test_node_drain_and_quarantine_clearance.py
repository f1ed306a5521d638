from __future__ import annotations

from rest_framework.test import APIClient

from controlplane.apps.fleet.models import AgentCommand, Node
from tests.controlplane.factories import NodeFactory


def test_drain_moves_a_healthy_node_to_draining_and_tells_its_agent(
    db: None, operator_client: APIClient
) -> None:
    node = NodeFactory(state="healthy")

    response = operator_client.post(f"/api/v1/nodes/{node.pk}/drain/")

    assert response.status_code == 200
    assert Node.objects.get(pk=node.pk).state == "draining"
    assert AgentCommand.objects.filter(node=node, type="drain", state="pending").count() == 1


def test_a_lost_node_cannot_be_drained(db: None, operator_client: APIClient) -> None:
    node = NodeFactory(state="lost")

    response = operator_client.post(f"/api/v1/nodes/{node.pk}/drain/")

    assert response.status_code == 409
    assert Node.objects.get(pk=node.pk).state == "lost"
    assert not AgentCommand.objects.exists()


def test_clearing_quarantine_lets_an_isolated_node_rejoin(db: None, operator_client: APIClient) -> None:
    node = NodeFactory(state="isolated", quarantined=True)

    response = operator_client.post(f"/api/v1/nodes/{node.pk}/clear-quarantine/")

    assert response.status_code == 200
    node.refresh_from_db()
    assert (node.quarantined, node.state) == (False, "joining")


def test_clearing_a_node_that_is_not_quarantined_is_a_conflict(db: None, operator_client: APIClient) -> None:
    node = NodeFactory(state="healthy", quarantined=False)

    response = operator_client.post(f"/api/v1/nodes/{node.pk}/clear-quarantine/")

    assert response.status_code == 409
