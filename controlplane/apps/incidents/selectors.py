"""Incident queries."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from django.db.models import QuerySet

from controlplane.apps.fleet.choices import CommandType
from controlplane.apps.fleet.models import AgentCommand
from controlplane.apps.incidents.models import Alert, FailureEvent

DRILL_ATTRIBUTION_S = 60.0
"""A failure on a node up to this long after a fault drill was sent to it is taken for the drill's
doing: it is handled like any failure, but it is no evidence against the node (it neither escalates
the node's later failures nor counts toward its quarantine)."""


def list_failure_events() -> QuerySet[FailureEvent]:
    return FailureEvent.objects.select_related("node", "device", "task")


def list_alerts() -> QuerySet[Alert]:
    return Alert.objects.select_related("node", "source_event", "acknowledged_by", "resolved_by")


def reported_rank(ev: FailureEvent) -> tuple[int | None, bool]:
    """The rank a worker report behind ``ev`` names (None for node events), and whether that worker
    said it stays alive with its state and waits for an order (``WorkerException.waiting``)."""
    report = (ev.evidence or {}).get("report", {})
    rank = report.get("rank")
    waiting = (report.get("event") or {}).get("waiting") is True
    return (rank if isinstance(rank, int) else None), waiting


def drills_sent(node_id: int, since: datetime) -> list[datetime]:
    """When fault drills were sent to the node from ``since`` (minus the attribution window) on."""
    return list(
        AgentCommand.objects.filter(
            node_id=node_id,
            type=CommandType.INJECT_FAULT,
            created_at__gte=since - timedelta(seconds=DRILL_ATTRIBUTION_S),
        ).values_list("created_at", flat=True)
    )


def caused_by_drill(at: datetime, drills: Sequence[datetime]) -> bool:
    window = timedelta(seconds=DRILL_ATTRIBUTION_S)
    return any(d <= at <= d + window for d in drills)
