"""The typed notification every destination gets: the JSON body of a webhook, the text of an Apprise
message."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel

from controlplane.apps.incidents.models import Alert


class AlertFields(BaseModel):
    id: int
    severity: str
    state: str
    message: str
    kind: str
    node: int | None
    node_name: str | None
    source_event: int | None
    created_at: datetime
    acknowledged_at: datetime | None
    resolved_at: datetime | None
    resolve_comment: str


class AlertNotification(BaseModel):
    type: Literal["alert.fired", "alert.resolved"]
    delivery: int
    route: str
    attempt: int
    timestamp: int
    """Unix seconds when this attempt was signed; equals the X-Unicron-Timestamp header."""
    alert: AlertFields

    @property
    def title(self) -> str:
        verb = "FIRING" if self.type == "alert.fired" else "RESOLVED"
        return f"[{self.alert.severity}] {verb}: {self.alert.message[:120]}"

    @property
    def text(self) -> str:
        a = self.alert
        lines = [
            a.message,
            f"severity {a.severity}, state {a.state}" + (f", kind {a.kind}" if a.kind else ""),
            f"node {a.node_name}" if a.node_name else "",
            f"raised {a.created_at.isoformat()}",
            f"resolved {a.resolved_at.isoformat()}: {a.resolve_comment}" if a.resolved_at else "",
            f"alert #{a.id}, delivery #{self.delivery} via {self.route}",
        ]
        return "\n".join(line for line in lines if line)


def alert_kind(alert: Alert) -> str:
    """An alert's kind is its failure event's (``node_lost``, ``cuda_error``, ...); '' without one."""
    return alert.source_event.kind if alert.source_event is not None else ""


def alert_fields(alert: Alert) -> AlertFields:
    return AlertFields(
        id=alert.pk,
        severity=alert.severity,
        state=alert.state,
        message=alert.message,
        kind=alert_kind(alert),
        node=alert.node_id,
        node_name=alert.node.name if alert.node is not None else None,
        source_event=alert.source_event_id,
        created_at=alert.created_at,
        acknowledged_at=alert.acknowledged_at,
        resolved_at=alert.resolved_at,
        resolve_comment=alert.resolve_comment,
    )
