"""Isolation is not forever: an operator returns an isolated device or node to service (audited, on
probation), a clean probation window returns it automatically, a quarantined node stays out until its
quarantine is cleared (its reason shown), and a failure it causes on probation isolates it again."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.apps.accounts.models import AuditEntry
from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.fleet.services import do_quarantine_node, do_set_device_state, do_set_node_state
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.incidents.probation import do_release_isolations
from controlplane.apps.incidents.reports import record_failure_report
from controlplane.core.protocol import WorkerReport
from controlplane.core.protocol.messages import WorkerException
from tests.controlplane.factories import FailureEventFactory, NodeFactory


def _isolated_device(minutes_ago: float = 0.0) -> Device:
    node = NodeFactory(state="healthy", devices=2)
    device = Device.objects.get(node=node, index=0)
    do_set_device_state(device, "isolated", "sev1 gpu_ecc (failure event 7): uncorrectable ECC error")
    Device.objects.filter(pk=device.pk).update(isolated_at=timezone.now() - timedelta(minutes=minutes_ago))
    device.refresh_from_db()
    return device


def _report(node: Node, message: str, device: int = 0) -> WorkerReport:
    now = datetime.now(UTC)
    return WorkerReport(
        report_id=str(uuid.uuid4()),
        task_id="999999",
        epoch=1,
        rank=0,
        device=device,
        detector="exception_propagation",
        occurred_at=now,
        detected_at=now,
        event=WorkerException(exc_type="RuntimeError", message=message, traceback=""),
    )


def test_an_operator_returns_an_isolated_device_to_service_on_probation(
    db: None, operator_client: APIClient
) -> None:
    device = _isolated_device()
    shown = operator_client.get(f"/api/v1/devices/{device.pk}/").json()
    assert shown["state"] == "isolated"
    assert "uncorrectable ECC" in shown["isolation_reason"]

    response = operator_client.post(f"/api/v1/devices/{device.pk}/return-to-service/")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["state"] == "healthy"
    assert body["probation_until"] is not None
    assert AuditEntry.objects.filter(verb="return_device_to_service").count() == 1
    again = operator_client.post(f"/api/v1/devices/{device.pk}/return-to-service/")
    assert again.status_code == 409
    assert "not isolated" in again.json()["detail"]


def test_a_viewer_cannot_return_a_device_to_service(db: None, viewer_client: APIClient) -> None:
    device = _isolated_device()
    assert viewer_client.post(f"/api/v1/devices/{device.pk}/return-to-service/").status_code == 403
    device.refresh_from_db()
    assert device.state == "isolated"


def test_an_operator_returns_an_isolated_node_but_not_a_quarantined_one(
    db: None, operator_client: APIClient
) -> None:
    node = NodeFactory(state="healthy")
    do_set_node_state(node, "isolated", "sev1 straggler (failure event 3)")
    response = operator_client.post(f"/api/v1/nodes/{node.pk}/return-to-service/")
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "joining"
    assert AuditEntry.objects.filter(verb="return_node_to_service").count() == 1

    bad = NodeFactory(state="healthy")
    do_quarantine_node(None, bad, "2 sev1 failures on it within 604800s (gpu-ecc)")
    shown = operator_client.get(f"/api/v1/nodes/{bad.pk}/").json()
    assert (shown["state"], shown["quarantined"]) == ("isolated", True)
    assert "2 sev1 failures" in shown["quarantine_reason"]
    refused = operator_client.post(f"/api/v1/nodes/{bad.pk}/return-to-service/")
    assert refused.status_code == 409
    assert "clear its quarantine" in refused.json()["detail"]
    bad.refresh_from_db()
    assert bad.state == "isolated"


@override_settings(UNICRON_RETURN_TO_SERVICE_AFTER_S=600.0, UNICRON_PROBATION_S=1200.0)
def test_a_clean_window_returns_isolated_hardware_automatically(db: None) -> None:
    clean = _isolated_device(minutes_ago=11)
    recent = _isolated_device(minutes_ago=5)
    failing = _isolated_device(minutes_ago=11)
    FailureEventFactory(node=failing.node, device=failing, kind="cuda_error", severity="sev2")
    seen_peer = _isolated_device(minutes_ago=11)
    FailureEventFactory(node=seen_peer.node, device=seen_peer, kind="connection_message", severity="sev3")
    node = NodeFactory(state="healthy")
    do_set_node_state(node, "isolated", "sev1 gpu_lost")
    quarantined = NodeFactory(state="healthy")
    do_quarantine_node(None, quarantined, "2 sev1 failures")
    Node.objects.filter(pk__in=[node.pk, quarantined.pk]).update(
        isolated_at=timezone.now() - timedelta(minutes=11)
    )

    released = do_release_isolations()

    assert sorted(released.devices) == sorted([clean.pk, seen_peer.pk])
    assert released.nodes == [node.pk]
    assert released.drilled_devices == released.drilled_nodes == []
    states = dict(Device.objects.values_list("pk", "state"))
    assert (states[clean.pk], states[recent.pk], states[failing.pk]) == ("healthy", "isolated", "isolated")
    assert Node.objects.get(pk=quarantined.pk).state == "isolated"
    clean.refresh_from_db()
    assert clean.probation_until is not None
    assert 1100 < (clean.probation_until - timezone.now()).total_seconds() <= 1200


def test_a_failure_it_causes_on_probation_isolates_it_again(db: None, operator_client: APIClient) -> None:
    device = _isolated_device()
    operator_client.post(f"/api/v1/devices/{device.pk}/return-to-service/")
    record_failure_report(device.node_id, _report(device.node, "CUDA error: an illegal memory access"))
    crash = FailureEvent.objects.get(device=device)
    assert crash.severity == "sev1"
    assert "on probation" in crash.summary
    peer = Device.objects.get(node=device.node, index=1)
    record_failure_report(peer.node_id, _report(peer.node, "CUDA error: an illegal memory access", 1))
    assert FailureEvent.objects.get(device=peer).severity == "sev2"  # not on probation: a restart


@override_settings(UNICRON_RETURN_TO_SERVICE_AFTER_S=600.0)
def test_an_isolation_of_unknown_age_starts_its_window_at_the_first_sweep(db: None) -> None:
    device = _isolated_device()
    Device.objects.filter(pk=device.pk).update(isolated_at=None)
    assert do_release_isolations().devices == []
    device.refresh_from_db()
    assert device.isolated_at is not None
    assert do_release_isolations(now=timezone.now() + timedelta(minutes=11)).devices == [device.pk]
