"""Incident queries."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from controlplane.apps.fleet.choices import CommandType
from controlplane.apps.fleet.models import AgentCommand, Device, Node
from controlplane.apps.incidents.models import FailureEvent
from controlplane.core import failures

DRILL_ATTRIBUTION_S = 60.0
"""A failure on a node up to this long after a fault drill was sent to it is taken for the drill's
doing: it is handled like any failure, but it is no evidence against the node (it neither escalates
the node's later failures nor counts toward its quarantine)."""


def list_failure_events() -> QuerySet[FailureEvent]:
    return FailureEvent.objects.select_related("node", "device", "task")


@dataclass(frozen=True, slots=True)
class ReportedWorker:
    """The worker a failure event's report is about, as stored with the event (``evidence["report"]``,
    a :class:`~controlplane.core.protocol.WorkerReport`): None fields for node events and older rows."""

    rank: int | None = None
    kind: str | None = None
    """The worker event: ``exited``, ``exception``, ``hang``, ``straggler``, ``missing``."""
    waiting: bool = False
    """The worker stays alive with its state and waits for an order (``WorkerException.waiting``)."""
    ratio: float | None = None
    """A straggler's compute time over its peers'."""

    @classmethod
    def from_json(cls, data: object) -> ReportedWorker:
        report: dict[str, Any] = data if isinstance(data, dict) else {}
        raw_event = report.get("event")
        event: dict[str, Any] = raw_event if isinstance(raw_event, dict) else {}
        rank, kind, ratio = report.get("rank"), event.get("kind"), event.get("ratio")
        return cls(
            rank=rank if isinstance(rank, int) and not isinstance(rank, bool) else None,
            kind=kind if isinstance(kind, str) else None,
            waiting=event.get("waiting") is True,
            ratio=float(ratio) if isinstance(ratio, (int, float)) and not isinstance(ratio, bool) else None,
        )


def reported_worker(ev: FailureEvent) -> ReportedWorker:
    return ReportedWorker.from_json((ev.evidence or {}).get("report"))


def reported_rank(ev: FailureEvent) -> tuple[int | None, bool]:
    """The rank a worker report behind ``ev`` names (None for node events), and whether that worker
    said it stays alive with its state and waits for an order (``WorkerException.waiting``)."""
    worker = reported_worker(ev)
    return worker.rank, worker.waiting


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


HISTORY_LIMIT = 200
"""The most recent events of a node read for its failure history (escalation and quarantine)."""

_CORE_DETECTOR_OF = {
    "node_health": failures.DetectorKind.HEARTBEAT,
    "process_supervision": failures.DetectorKind.PROCESS_EXIT,
    "exception_propagation": failures.DetectorKind.EXCEPTION,
}


def stored_evidence(ev: FailureEvent) -> failures.Evidence:
    """The core evidence stored with ``ev``; rebuilt from the row's columns for events stored without
    one (a node declared lost, older rows)."""
    try:
        return failures.Evidence.from_json((ev.evidence or {}).get("core"))
    except ValueError:
        return failures.Evidence(
            detector=str(_CORE_DETECTOR_OF.get(ev.detector, ev.detector)),
            node=ev.node.name if ev.node is not None else None,
            device=ev.device.index if ev.device is not None else None,
            task_id=str(ev.task_id) if ev.task_id is not None else None,
            message=ev.summary,
            occurred_at=ev.occurred_at.timestamp(),
        )


def stored_classification(ev: FailureEvent) -> failures.Classification:
    """How ``ev`` was classified; rebuilt from its columns (severity, kind = the rule) when the row
    holds no full classification."""
    try:
        return failures.Classification.from_json((ev.evidence or {}).get("classification"))
    except ValueError:
        severity = failures.Severity(ev.severity)
        return failures.Classification(
            severity=severity,
            action=failures.ACTION_FOR[severity],
            category=failures.Category.UNKNOWN,
            rule=ev.kind,
            reason=ev.summary,
            blame=failures.blame_of_rule(ev.kind),
        )


def list_failure_history(
    node: Node, window_s: float, before: float | None = None
) -> list[failures.FailureRecord]:
    """The node's failure history for the escalation policy and the quarantine rule, oldest first:
    the causes it reported within ``window_s`` (up to ``before``, a timestamp), without consequences
    (a peer's failure seen through a collective), fault drills' doing, stragglers judged not worth
    isolating, and escalations (a recovery that failed re-states its source's evidence)."""
    since = timezone.now() - timedelta(seconds=window_s)
    rows = (
        FailureEvent.objects.filter(node=node, occurred_at__gte=since, escalated_from__isnull=True)
        .select_related("node", "device")
        .order_by("-occurred_at", "-id")[:HISTORY_LIMIT]
    )
    drills = drills_sent(node.pk, since)
    out: list[failures.FailureRecord] = []
    for row in rows:
        if (row.evidence or {}).get("tolerated") or caused_by_drill(row.occurred_at, drills):
            continue
        record = failures.FailureRecord(stored_evidence(row), stored_classification(row))
        if record.classification.blame is not failures.Blame.CAUSE:
            continue
        if before is not None and record.evidence.occurred_at > before:
            continue
        out.append(record)
    out.reverse()
    return out


def has_cause_evidence_since(
    since: datetime, *, device: Device | None = None, node: Node | None = None
) -> bool:
    """Whether the device (or the node) reported a cause failure after ``since`` (its isolation); a
    fault drill's doing is none."""
    rows = FailureEvent.objects.filter(occurred_at__gt=since, escalated_from__isnull=True)
    rows = rows.filter(device=device) if device is not None else rows.filter(node=node)
    node_id = device.node_id if device is not None else (node.pk if node is not None else None)
    drills = drills_sent(node_id, since) if node_id is not None else []
    return any(
        stored_classification(row).blame is failures.Blame.CAUSE
        and not caused_by_drill(row.occurred_at, drills)
        for row in rows.select_related("node", "device").order_by("-occurred_at")[:HISTORY_LIMIT]
    )


def isolated_by_drill(node_id: int, isolated_at: datetime) -> bool:
    """Whether an isolation on the node at ``isolated_at`` was a fault drill's doing: a drill was sent to
    the node up to :data:`DRILL_ATTRIBUTION_S` before."""
    return caused_by_drill(isolated_at, drills_sent(node_id, isolated_at))
