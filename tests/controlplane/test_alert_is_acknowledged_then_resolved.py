from __future__ import annotations

from rest_framework.test import APIClient

from controlplane.apps.accounts.models import AuditEntry
from controlplane.apps.incidents.models import Alert
from tests.controlplane.factories import AlertFactory


def test_acknowledge_then_resolve_with_comments(db: None, operator_client: APIClient) -> None:
    alert = AlertFactory()

    ack = operator_client.post(
        f"/api/v1/alerts/{alert.pk}/acknowledge/", {"comment": "looking"}, format="json"
    )
    resolved = operator_client.post(
        f"/api/v1/alerts/{alert.pk}/resolve/", {"comment": "GPU swapped"}, format="json"
    )

    assert ack.status_code == 200
    assert resolved.status_code == 200
    body = resolved.json()
    assert body["state"] == "resolved"
    assert (body["acknowledge_comment"], body["resolve_comment"]) == ("looking", "GPU swapped")
    assert body["acknowledged_by"] == body["resolved_by"]
    assert body["acknowledged_at"] is not None
    assert body["resolved_at"] is not None
    assert AuditEntry.objects.filter(object_type="incidents.alert", object_id=str(alert.pk)).count() == 2


def test_resolve_needs_a_comment(db: None, operator_client: APIClient) -> None:
    alert = AlertFactory()

    response = operator_client.post(f"/api/v1/alerts/{alert.pk}/resolve/", {}, format="json")

    assert response.status_code == 400
    assert "comment" in response.json()
    assert Alert.objects.get(pk=alert.pk).state == "open"


def test_a_resolved_alert_stays_resolved(db: None, operator_client: APIClient) -> None:
    alert = AlertFactory(state="resolved")

    ack = operator_client.post(f"/api/v1/alerts/{alert.pk}/acknowledge/", {}, format="json")
    again = operator_client.post(f"/api/v1/alerts/{alert.pk}/resolve/", {"comment": "x"}, format="json")

    assert (ack.status_code, again.status_code) == (409, 409)
    assert Alert.objects.get(pk=alert.pk).state == "resolved"


def test_alerts_filter_by_severity_state_and_node(db: None, operator_client: APIClient) -> None:
    a1 = AlertFactory(severity="sev1")
    AlertFactory(severity="sev2")
    AlertFactory(severity="sev1", state="resolved")

    response = operator_client.get(
        "/api/v1/alerts/", {"severity": "sev1", "state": "open", "node": a1.node_id}
    )

    assert [a["id"] for a in response.json()["results"]] == [a1.pk]
