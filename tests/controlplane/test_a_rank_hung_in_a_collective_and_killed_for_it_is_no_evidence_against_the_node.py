"""A network partition between two healthy nodes leaves every rank of the task waiting in the gradient
all-reduce; each agent reports its rank hung *in a collective* and kills it. Both reports are consequences:
handled for the task, but they never build the node's or the device's failure history (before, each cut
counted a hang and a SIGKILL against both healthy devices: the third cut within the hour escalated its hang
to sev2; as causes of the network category, a hang whose restart failed during a longer cut would have
become sev1 and isolated the device, and one on a device on probation would have isolated it again at once).
A rank stuck in its own work is still a cause."""

from __future__ import annotations

import signal
import uuid
from datetime import UTC, datetime, timedelta

from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.incidents.reports import record_failure_report
from controlplane.apps.incidents.selectors import list_failure_history
from controlplane.apps.planning.handling import check_quarantine
from controlplane.core.protocol import Detector, HangVerdict, WorkerEvent, WorkerExited, WorkerReport
from tests.controlplane.factories import NodeFactory


def _report(event: WorkerEvent, detector: Detector, at: datetime) -> WorkerReport:
    return WorkerReport(
        report_id=str(uuid.uuid4()),
        task_id="999999",
        epoch=1,
        rank=0,
        device=0,
        detector=detector,
        occurred_at=at,
        detected_at=at,
        event=event,
    )


def _hung_then_killed(node: Node, in_collective: bool, at: datetime) -> None:
    """The agent's hang verdict on the rank, then the rank's exit from the agent's SIGKILL."""
    hang = HangVerdict(
        iteration=15,
        elapsed_s=4.02,
        threshold_s=2.0,
        median_iteration_s=0.4,
        phase="train",
        stack='  File "torch/distributed/distributed_c10d.py", line 2806 in all_reduce\n',
        in_collective=in_collective,
    )
    record_failure_report(node.pk, _report(hang, "statistical_monitoring", at))
    killed = WorkerExited(exit_code=None, signal=signal.SIGKILL, signal_name="SIGKILL", expected=False)
    record_failure_report(node.pk, _report(killed, "process_supervision", at + timedelta(seconds=2)))


def test_repeated_partitions_leave_the_node_and_its_device_clean(db: None) -> None:
    node: Node = NodeFactory(devices=1)
    start = datetime.now(UTC) - timedelta(minutes=10)
    for cut in range(4):
        _hung_then_killed(node, in_collective=True, at=start + timedelta(minutes=2 * cut))
    events = list(FailureEvent.objects.filter(node=node).order_by("occurred_at", "id"))
    assert [(e.kind, e.severity) for e in events] == [("hang_in_collective", "sev3"), ("killed", "sev2")] * 4
    assert {e.evidence["classification"]["blame"] for e in events} == {"consequence"}
    device = Device.objects.get(node=node, index=0)
    assert (device.error_count, device.sev2_count, device.sev1_count) == (0, 0, 0)
    assert list_failure_history(node, 3600.0) == []
    assert check_quarantine(node) is False
    node.refresh_from_db()
    assert not node.quarantined


def test_a_rank_stuck_in_its_own_work_is_still_a_cause(db: None) -> None:
    node: Node = NodeFactory(devices=1)
    _hung_then_killed(node, in_collective=False, at=datetime.now(UTC) - timedelta(minutes=1))
    events = list(FailureEvent.objects.filter(node=node).order_by("occurred_at", "id"))
    assert [(e.kind, e.evidence["classification"]["blame"]) for e in events] == [
        ("hang", "cause"),
        ("killed", "cause"),
    ]
    assert len(list_failure_history(node, 3600.0)) == 2
    assert Device.objects.get(node=node, index=0).error_count == 2
