"""A rank whose collective broke because a peer died (gloo "Connection closed by peer") reports a
consequence: handled for its task, but it never builds the node's or the device's failure history. In a
live run such reports escalated by repetition (sev3 → sev2 → sev1) and quarantined a healthy node."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.incidents.reports import record_failure_report
from controlplane.apps.incidents.selectors import list_failure_history
from controlplane.apps.planning.handling import check_quarantine
from controlplane.core.protocol import WorkerReport
from controlplane.core.protocol.messages import WorkerException
from tests.controlplane.factories import NodeFactory


def _report(exc_type: str, message: str) -> WorkerReport:
    now = datetime.now(UTC)
    return WorkerReport(
        report_id=str(uuid.uuid4()),
        task_id="999999",
        epoch=1,
        rank=0,
        device=0,
        detector="exception_propagation",
        occurred_at=now,
        detected_at=now,
        event=WorkerException(exc_type=exc_type, message=message, traceback="", in_collective=True),
    )


PEER_CLOSED = ("RuntimeError", "[gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.7]:4242")
CUDA = ("RuntimeError", "CUDA error: an illegal memory access was encountered")


def test_repeated_peer_failures_leave_the_node_and_its_device_clean(db: None) -> None:
    node: Node = NodeFactory(devices=1)
    for _ in range(6):
        record_failure_report(node.pk, _report(*PEER_CLOSED))
    events = list(FailureEvent.objects.filter(node=node))
    assert len(events) == 6
    assert {(e.severity, e.kind) for e in events} == {("sev3", "connection_message")}
    assert {e.evidence["classification"]["blame"] for e in events} == {"consequence"}
    device = Device.objects.get(node=node, index=0)
    assert (device.error_count, device.sev2_count, device.sev1_count) == (0, 0, 0)
    assert list_failure_history(node, 3600.0) == []
    assert check_quarantine(node) is False
    node.refresh_from_db()
    assert not node.quarantined
    assert node.state != "isolated"


def test_crashes_of_the_node_itself_still_escalate(db: None) -> None:
    node: Node = NodeFactory(devices=1)
    record_failure_report(node.pk, _report(*PEER_CLOSED))
    record_failure_report(node.pk, _report(*CUDA))
    record_failure_report(node.pk, _report(*CUDA))
    crashes = list(FailureEvent.objects.filter(node=node, kind="cuda_error").order_by("occurred_at", "id"))
    assert [e.severity for e in crashes] == ["sev2", "sev1"]
    assert len(list_failure_history(node, 3600.0)) == 2
    device = Device.objects.get(node=node, index=0)
    assert device.error_count == 2
