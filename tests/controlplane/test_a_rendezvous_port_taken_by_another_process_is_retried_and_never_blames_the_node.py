"""Rank 0 whose rendezvous ``TCPStore`` cannot listen because another process holds the epoch's port
(``EADDRINUSE``) reports it and exits: the task is retried in place (every retry draws a fresh port), as
often as that happens, and neither the exception nor the worker's exit code that follows it counts
against the device or the node's failure history."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.incidents.reports import record_failure_report
from controlplane.apps.incidents.selectors import list_failure_history
from controlplane.apps.planning.handling import check_quarantine
from controlplane.core import failures
from controlplane.core.protocol import WorkerReport
from controlplane.core.protocol.messages import WorkerEvent, WorkerException, WorkerExited
from tests.controlplane.factories import NodeFactory

PORT_TAKEN = (
    "torch.distributed.DistNetworkError",
    "The server socket has failed to listen on any local network address. port: 20417, useIpv6: false, "
    "code: -98, name: EADDRINUSE, message: address already in use",
)
EXIT_EXCEPTION = 17  # agents.training.hook.EXIT_EXCEPTION: the hook's exit after forwarding an exception
EXITED = WorkerExited(exit_code=EXIT_EXCEPTION, expected=False)


def _report(epoch: int, detector: str, event: WorkerEvent) -> WorkerReport:
    now = datetime.now(UTC)
    return WorkerReport(
        report_id=str(uuid.uuid4()),
        task_id="999999",
        epoch=epoch,
        rank=0,
        device=0,
        detector=detector,
        occurred_at=now,
        detected_at=now,
        event=event,
    )


def _collision(node: Node, epoch: int) -> None:
    """What the agent sends: the hook's exception, then process supervision's exit."""
    exc = WorkerException(exc_type=PORT_TAKEN[0], message=PORT_TAKEN[1], traceback="", in_collective=False)
    record_failure_report(node.pk, _report(epoch, "exception_propagation", exc))
    record_failure_report(node.pk, _report(epoch, "process_supervision", EXITED))


def test_collisions_are_retried_and_leave_the_node_and_its_device_clean(db: None) -> None:
    node: Node = NodeFactory(devices=1)
    for epoch in (1, 2, 3, 4):
        _collision(node, epoch)
    exceptions = list(FailureEvent.objects.filter(node=node, detector="exception_propagation"))
    assert {(e.kind, e.severity, e.action) for e in exceptions} == {
        ("rendezvous_port_in_use", "sev3", "retry_in_place")
    }
    exits = list(FailureEvent.objects.filter(node=node, detector="process_supervision"))
    assert len(exits) == 4
    assert {e.evidence["classification"]["blame"] for e in exceptions + exits} == {"consequence"}
    assert {e.severity for e in exits} == {"sev2"}  # never escalated to isolating the device
    device = Device.objects.get(node=node, index=0)
    assert (device.error_count, device.sev2_count, device.sev1_count) == (0, 0, 0)
    assert list_failure_history(node, 3600.0) == []
    assert check_quarantine(node) is False
    node.refresh_from_db()
    assert not node.quarantined
    assert node.state != "isolated"


def test_a_collision_during_a_retry_is_retried_again_not_escalated() -> None:
    ev = failures.Evidence(
        detector=failures.DetectorKind.EXCEPTION,
        exception_type=PORT_TAKEN[0],
        message=PORT_TAKEN[1],
        node="n1",
        device=0,
        during_recovery=failures.Action.RETRY_IN_PLACE,
    )
    c = failures.classify(ev)
    assert (c.rule, c.action, c.escalated_from) == (
        "rendezvous-port-in-use",
        failures.Action.RETRY_IN_PLACE,
        None,
    )
    assert c.blame is failures.Blame.CONSEQUENCE


def test_an_exit_after_the_ranks_own_failure_still_counts(db: None) -> None:
    node: Node = NodeFactory(devices=1)
    cuda = WorkerException(
        exc_type="RuntimeError", message="CUDA error: an illegal memory access was encountered", traceback=""
    )
    record_failure_report(node.pk, _report(1, "exception_propagation", cuda))
    record_failure_report(node.pk, _report(1, "process_supervision", EXITED))
    [exited] = FailureEvent.objects.filter(node=node, detector="process_supervision")
    assert exited.evidence["classification"]["blame"] == "cause"
    assert Device.objects.get(node=node, index=0).error_count == 2
