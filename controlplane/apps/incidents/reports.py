"""Failure evidence from the agents becomes classified failure events: a worker's report (exited, exception,
hang, straggler) and the ranks an agent lost when it restarted. Classification is the pure table of
:mod:`controlplane.core.failures`, with this node's recent history for escalation.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from controlplane.apps.fleet.authority import task_pk
from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.fleet.services import do_count_device_error
from controlplane.apps.incidents import choices as incident_choices
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.incidents.selectors import caused_by_drill, drills_sent
from controlplane.apps.incidents.services import FailureReport, do_raise_alert, do_record_failure_event
from controlplane.apps.planning.triggers import request_failure_handling
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.core import failures
from controlplane.core.protocol import Hello, WorkerReport

_CORE_DETECTOR = {
    "exited": failures.DetectorKind.PROCESS_EXIT,
    "exception": failures.DetectorKind.EXCEPTION,
    "hang": failures.DetectorKind.HANG,
    "straggler": failures.DetectorKind.STRAGGLER,
}
_WIRE_DETECTOR = {
    "exited": "process_supervision",
    "exception": "exception_propagation",
    "hang": "statistical_monitoring",
    "straggler": "statistical_monitoring",
}
ACTION_FOR = {
    failures.Action.RETRY_IN_PLACE: incident_choices.Action.RETRY_IN_PLACE,
    failures.Action.RESTART_PROCESS: incident_choices.Action.RESTART_PROCESSES,
    failures.Action.ISOLATE_AND_RECONFIGURE: incident_choices.Action.ISOLATE_AND_REPLAN,
}
_POLICY = failures.EscalationPolicy()
_HISTORY_LIMIT = 100


def _evidence_of(node_name: str, report: WorkerReport) -> failures.Evidence:
    event = report.event
    fields: dict[str, Any] = {}
    if event.kind == "exited":
        fields = {"exit_code": event.exit_code, "signal": event.signal, "message": event.signal_name or ""}
    elif event.kind == "exception":
        fields = {"exception_type": event.exc_type, "message": event.message}
    elif event.kind == "hang":
        fields = {
            "message": f"iteration {event.iteration} ran {event.elapsed_s:.2f}s > {event.threshold_s:.2f}s"
        }
    elif event.kind == "straggler":
        fields = {"message": f"rank {report.rank} compute {event.ratio:.2f}x its peers"}
    return failures.Evidence(
        detector=_CORE_DETECTOR[event.kind],
        node=node_name,
        device=report.device,
        task_id=report.task_id,
        occurred_at=report.occurred_at.timestamp(),
        **fields,
    )


def _evidence_json(ev: failures.Evidence) -> dict[str, Any]:
    return {
        "detector": str(ev.detector),
        "exit_code": ev.exit_code,
        "signal": ev.signal,
        "exception_type": ev.exception_type,
        "message": ev.message,
        "node": ev.node,
        "device": ev.device,
        "task_id": ev.task_id,
        "occurred_at": ev.occurred_at,
    }


def _classification_json(c: failures.Classification) -> dict[str, Any]:
    return {
        "severity": str(c.severity),
        "action": str(c.action),
        "category": str(c.category),
        "rule": c.rule,
        "reason": c.reason,
        "escalated_from": str(c.escalated_from) if c.escalated_from else None,
    }


def _history(node: Node, before: float) -> list[failures.FailureRecord]:
    """This node's recent classified events (those stored by the agent link carry their core evidence
    and classification), oldest first, for the escalation policy."""
    since = timezone.now() - timedelta(seconds=_POLICY.recurrence_window_s)
    rows = FailureEvent.objects.filter(node=node, occurred_at__gte=since).order_by("-occurred_at")[
        :_HISTORY_LIMIT
    ]
    drills = drills_sent(node.pk, since)
    records = []
    for row in rows:
        if caused_by_drill(row.occurred_at, drills):
            continue  # a fault drill's failures do not make the node's next ones worse
        core, cls = row.evidence.get("core"), row.evidence.get("classification")
        if not isinstance(core, dict) or not isinstance(cls, dict):
            continue
        try:
            records.append(
                failures.FailureRecord(
                    failures.Evidence(**core),
                    failures.Classification(
                        severity=failures.Severity(cls["severity"]),
                        action=failures.Action(cls["action"]),
                        category=failures.Category(cls["category"]),
                        rule=cls["rule"],
                        reason=cls["reason"],
                        escalated_from=failures.Severity(cls["escalated_from"])
                        if cls.get("escalated_from")
                        else None,
                    ),
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    return [r for r in reversed(records) if r.evidence.occurred_at <= before]


@transaction.atomic
def record_failure_report(node_id: int, report: WorkerReport) -> str:
    """A worker's failure evidence (exited unexpectedly, exception, hang, straggler) → one classified
    :class:`FailureEvent`, idempotent by ``report_id``; evidence of the task's current epoch is handled
    after the settle window, older epochs are recorded but never acted on (fencing). Returns what
    happened (for the log)."""
    event = report.event
    report_id = uuid.UUID(report.report_id)
    if FailureEvent.objects.filter(report_id=report_id).exists():
        return "duplicate report"
    node = Node.objects.get(pk=node_id)
    evidence = _evidence_of(node.name, report)
    c = failures.classify(evidence, _history(node, evidence.occurred_at), _POLICY)
    device = Device.objects.filter(node=node, index=report.device).first()
    pk = task_pk(report.task_id)
    task = TrainingTask.objects.filter(pk=pk).first() if pk is not None else None
    stored, created = do_record_failure_event(
        FailureReport(
            detector=incident_choices.Detector(report.detector or _WIRE_DETECTOR[event.kind]),
            kind=c.rule.replace("-", "_"),
            severity=incident_choices.Severity(c.severity.value),
            occurred_at=report.occurred_at,
            action=ACTION_FOR[c.action],
            summary=c.reason,
            evidence={
                "report": report.model_dump(mode="json"),
                "core": _evidence_json(evidence),
                "classification": _classification_json(c),
            },
            report_id=report_id,
            node=node,
            device=device,
            task=task,
        )
    )
    if not created:
        return "duplicate report"
    FailureEvent.objects.filter(pk=stored.pk).update(task_epoch=report.epoch)
    current = task is not None and report.epoch == task.epoch
    if current or task is None:
        request_failure_handling(stored.pk)
    else:  # fencing: evidence from an older epoch never triggers an action
        now = timezone.now()
        FailureEvent.objects.filter(pk=stored.pk).update(handled_at=now, resolved_at=now)
    if device is not None:
        do_count_device_error(device, c.severity.value)
    if c.severity is failures.Severity.SEV1:
        do_raise_alert(
            incident_choices.Severity.SEV1,
            f"{node.name}/{report.device}: {c.reason}",
            source_event=stored,
            node=node,
        )
    return f"failure event {stored.pk} {c.severity} {c.rule}"


_MISSING_NS = uuid.UUID("3b0f6f3e-5f0e-4d7e-9d55-1c2a4b8e7f21")


def report_missing_workers(node: Node, hello: Hello) -> None:
    """An agent that restarted (a new process) lost its workers — and the reports it had not sent. A
    rank the node should run at its task's current epoch (that epoch's transition completed, so it
    was running) but that the hello does not list becomes a failure event, as process supervision
    would have reported it."""
    listed = {(w.task_id, w.epoch, w.rank) for w in hello.workers}
    allocations = Allocation.objects.filter(
        active=True, device__node=node, task__state__in=["running", "reconfiguring"]
    ).select_related("task", "device")
    for a in allocations:
        task = a.task
        if a.epoch != task.epoch or (str(task.pk), task.epoch, a.rank) in listed:
            continue
        if task.transitions.filter(epoch=task.epoch).exclude(state="completed").exists():
            continue  # still being started: its commands may not have reached this agent yet
        evidence = failures.Evidence(
            detector=failures.DetectorKind.PROCESS_EXIT,
            node=node.name,
            device=a.device.index,
            task_id=str(task.pk),
            message="worker not running after the agent reconnected (agent restart)",
            occurred_at=timezone.now().timestamp(),
        )
        c = failures.classify(evidence)
        report_id = uuid.uuid5(_MISSING_NS, f"{task.pk}:{task.epoch}:{a.rank}:{hello.hostname}:{node.pk}")
        stored, created = do_record_failure_event(
            FailureReport(
                detector=incident_choices.Detector.PROCESS_SUPERVISION,
                kind="worker_missing",
                severity=incident_choices.Severity(c.severity.value),
                occurred_at=timezone.now(),
                action=ACTION_FOR[c.action],
                summary=f"rank {a.rank} missing after the agent of {node.name} reconnected: {c.reason}",
                evidence={
                    "report": {"rank": a.rank, "event": {"kind": "missing"}},
                    "core": _evidence_json(evidence),
                    "classification": _classification_json(c),
                },
                report_id=report_id,
                node=node,
                device=a.device,
                task=task,
            )
        )
        if created:
            FailureEvent.objects.filter(pk=stored.pk).update(task_epoch=task.epoch)
            request_failure_handling(stored.pk)
