"""Failure evidence from the agents becomes classified failure events: a worker's report (exited, exception,
hang, straggler) and the ranks an agent lost when it restarted. Classification is the pure table of
:mod:`controlplane.core.failures`, with this node's recent history for escalation.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from controlplane.apps.common.triggers import request_failure_handling
from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.fleet.services import do_count_device_error
from controlplane.apps.incidents import choices as incident_choices
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.incidents.probation import on_probation
from controlplane.apps.incidents.selectors import list_failure_history, stored_classification
from controlplane.apps.incidents.services import FailureReport, do_raise_alert, do_record_failure_event
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.apps.training.selectors import task_pk
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
_POLICY = failures.EscalationPolicy()
_HANG_KINDS = [name.replace("-", "_") for name in (failures.HANG, failures.HANG_IN_COLLECTIVE)]
"""The stored kinds of a hang verdict (after which the agent kills the rank)."""


def _evidence_of(node_name: str, report: WorkerReport) -> failures.Evidence:
    event = report.event
    fields: dict[str, Any] = {}
    if event.kind == "exited":
        fields = {"exit_code": event.exit_code, "signal": event.signal, "message": event.signal_name or ""}
    elif event.kind == "exception":
        fields = {"exception_type": event.exc_type, "message": event.message}
    elif event.kind == "hang":
        message = f"iteration {event.iteration} ran {event.elapsed_s:.2f}s > {event.threshold_s:.2f}s"
        if event.in_collective:  # waiting for its peers: a consequence (the classification's row says)
            message += f" {failures.HANG_IN_COLLECTIVE_MESSAGE}"
        fields = {"message": message}
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
    device = Device.objects.filter(node=node, index=report.device).first()
    pk = task_pk(report.task_id)
    task = TrainingTask.objects.filter(pk=pk).first() if pk is not None else None
    why = _consequence_reported(node, device, task, report.epoch) if event.kind == "exited" else None
    if why is not None:  # it left because of what it reported: the table alone, blamed elsewhere
        c = failures.classify_evidence(evidence)
        c = replace(c, blame=why.blame, reason=f"{c.reason}, after reporting {why.rule} (not its failure)")
    else:
        history = list_failure_history(node, _POLICY.recurrence_window_s, before=evidence.occurred_at)
        c = failures.classify(evidence, history, _POLICY)
        probation = device is not None and on_probation(device.probation_until)
        if probation or on_probation(node.probation_until):
            c = failures.escalate_on_probation(c)
    stored, created = do_record_failure_event(
        FailureReport(
            detector=incident_choices.Detector(report.detector or _WIRE_DETECTOR[event.kind]),
            kind=c.rule.replace("-", "_"),
            severity=incident_choices.Severity(c.severity.value),
            occurred_at=report.occurred_at,
            action=incident_choices.Action(c.action.value),
            summary=c.reason,
            evidence={
                "report": report.model_dump(mode="json"),
                "core": evidence.to_json(),
                "classification": c.to_json(),
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
    if device is not None and c.blame is failures.Blame.CAUSE:
        do_count_device_error(device, c.severity.value)  # a peer's failure seen here is not this device's
    if c.severity is failures.Severity.SEV1:
        do_raise_alert(
            incident_choices.Severity.SEV1,
            f"{node.name}/{report.device}: {c.reason}",
            source_event=stored,
            node=node,
        )
    return f"failure event {stored.pk} {c.severity} {c.rule}"


def _consequence_reported(
    node: Node, device: Device | None, task: TrainingTask | None, epoch: int
) -> failures.Classification | None:
    """The classification of the exception or hang verdict this rank (its device, task and epoch) reported
    before it exited, when that evidence was blamed elsewhere (a peer's failure seen through a collective,
    its rendezvous port taken, a wait in the all-reduce for peers it could not reach, after which its
    agent killed it); otherwise None. The rank then exits because of it: the worker's exit code (or the
    agent's SIGKILL) is a consequence too and counts against neither the device nor the node's history.
    Reports of one rank arrive in order (the agent's outbox), so the evidence is recorded before the
    exit."""
    if device is None:
        return None
    reported = (
        FailureEvent.objects.filter(
            node=node,
            device=device,
            task=task,
            task_epoch=epoch,
        )
        .filter(
            Q(detector=incident_choices.Detector.EXCEPTION_PROPAGATION)
            | Q(detector=incident_choices.Detector.STATISTICAL_MONITORING, kind__in=_HANG_KINDS)
        )
        .order_by("-occurred_at", "-id")
        .first()
    )
    if reported is None:
        return None
    why = stored_classification(reported)
    return None if why.blame is failures.Blame.CAUSE else why


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
                action=incident_choices.Action(c.action.value),
                summary=f"rank {a.rank} missing after the agent of {node.name} reconnected: {c.reason}",
                evidence={
                    "report": {"rank": a.rank, "event": {"kind": "missing"}},
                    "core": evidence.to_json(),
                    "classification": c.to_json(),
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


def on_agent_said_hello(sender: object, node: Node, hello: Hello, **_: object) -> None:
    """Receiver of :data:`controlplane.apps.fleet.signals.agent_said_hello`."""
    report_missing_workers(node, hello)
