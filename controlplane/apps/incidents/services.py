"""Incident services: record failure events (idempotent by report id), escalate, alerts."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.apps.accounts.services import Actor, acting_user, do_record_audit
from controlplane.apps.common.broadcast import send_event_on_commit
from controlplane.apps.common.cas import swap_state
from controlplane.apps.common.errors import Conflict
from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.incidents.choices import ALERT_MACHINE, Action, AlertState, Detector, Severity
from controlplane.apps.incidents.models import Alert, FailureEvent
from controlplane.apps.incidents.signals import alert_raised, alert_resolved
from controlplane.apps.training.models import TrainingTask


@dataclass(frozen=True)
class FailureReport:
    detector: Detector
    kind: str
    severity: Severity
    occurred_at: datetime
    action: Action = Action.NONE
    summary: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    report_id: uuid.UUID | None = None
    node: Node | None = None
    device: Device | None = None
    task: TrainingTask | None = None
    escalated_from: FailureEvent | None = None


def failure_event_payload(event: FailureEvent) -> dict[str, Any]:
    return {
        "id": event.pk,
        "detector": event.detector,
        "kind": event.kind,
        "severity": event.severity,
        "action": event.action,
        "node": event.node_id,
        "device": event.device_id,
        "task": event.task_id,
        "detected_at": event.detected_at.isoformat(),
        "escalated_from": event.escalated_from_id,
    }


def do_record_failure_event(report: FailureReport) -> tuple[FailureEvent, bool]:
    """Store a failure event; a re-sent report (same report_id) returns the stored one, created=False."""
    report_id = report.report_id or uuid.uuid4()
    existing = FailureEvent.objects.filter(report_id=report_id).first()
    if existing is not None:
        return existing, False
    try:
        with transaction.atomic():
            event = FailureEvent.objects.create(
                report_id=report_id,
                detector=report.detector,
                kind=report.kind,
                summary=report.summary,
                severity=report.severity,
                action=report.action,
                evidence=report.evidence,
                occurred_at=report.occurred_at,
                detected_at=timezone.now(),
                node=report.node,
                device=report.device,
                task=report.task,
                escalated_from=report.escalated_from,
            )
            send_event_on_commit("failure_event.recorded", failure_event_payload(event))
    except IntegrityError:  # a concurrent duplicate won the unique report_id
        return FailureEvent.objects.get(report_id=report_id), False
    return event, True


@transaction.atomic
def do_resolve_failure_event(event: FailureEvent) -> bool:
    updated = FailureEvent.objects.filter(pk=event.pk, resolved_at__isnull=True).update(
        resolved_at=timezone.now()
    )
    if updated:
        send_event_on_commit("failure_event.resolved", {"id": event.pk})
    return updated == 1


# --- alerts ---------------------------------------------------------------------------------------


def alert_payload(alert: Alert) -> dict[str, Any]:
    return {
        "id": alert.pk,
        "severity": alert.severity,
        "state": alert.state,
        "message": alert.message,
        "node": alert.node_id,
        "source_event": alert.source_event_id,
    }


@transaction.atomic
def do_raise_alert(
    severity: Severity, message: str, source_event: FailureEvent | None = None, node: Node | None = None
) -> Alert:
    if node is None and source_event is not None:
        node = source_event.node
    alert = Alert.objects.create(severity=severity, message=message, source_event=source_event, node=node)
    send_event_on_commit("alert.raised", alert_payload(alert))
    alert_raised.send(sender=Alert, alert=alert)  # notifications: deliveries to the matching routes
    return alert


def check_acknowledge_alert(alert: Alert) -> None:
    if alert.state != AlertState.OPEN:
        raise Conflict(f"Alert {alert.pk} is {alert.state}; only open alerts can be acknowledged.")


@transaction.atomic
def do_acknowledge_alert(actor: Actor, alert: Alert, comment: str = "") -> Alert:
    check_acknowledge_alert(alert)
    user = acting_user(actor)
    swap_state(
        Alert,
        alert.pk,
        ALERT_MACHINE,
        alert.state,
        AlertState.ACKNOWLEDGED,
        acknowledged_by=user,
        acknowledged_at=timezone.now(),
        acknowledge_comment=comment,
    )
    alert.refresh_from_db()
    do_record_audit(
        actor, "acknowledge_alert", alert, {"state": "open"}, {"state": alert.state, "comment": comment}
    )
    send_event_on_commit("alert.state", alert_payload(alert))
    return alert


def check_resolve_alert(alert: Alert) -> None:
    if ALERT_MACHINE.is_terminal(alert.state):
        raise Conflict(f"Alert {alert.pk} is already {alert.state}.")


@transaction.atomic
def do_resolve_alert(actor: Actor, alert: Alert, comment: str) -> Alert:
    check_resolve_alert(alert)
    user = acting_user(actor)
    before = alert.state
    swap_state(
        Alert,
        alert.pk,
        ALERT_MACHINE,
        before,
        AlertState.RESOLVED,
        resolved_by=user,
        resolved_at=timezone.now(),
        resolve_comment=comment,
    )
    alert.refresh_from_db()
    do_record_audit(
        actor, "resolve_alert", alert, {"state": before}, {"state": alert.state, "comment": comment}
    )
    send_event_on_commit("alert.state", alert_payload(alert))
    alert_resolved.send(sender=Alert, alert=alert)  # notifications: a resolution to the routes that got it
    return alert
