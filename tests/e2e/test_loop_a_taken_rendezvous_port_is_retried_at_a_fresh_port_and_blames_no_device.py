"""Another process listens on the port a task's first epoch rendezvouses at: rank 0 of the real Megatron-Core
worker cannot open its ``TCPStore`` (``EADDRINUSE``), reports it and exits. The control plane retries the task
in place at a fresh port and training runs; neither the exception nor the worker's exit that follows it is
evidence against the device or the node (no device error, an empty failure history, the node healthy)."""

from __future__ import annotations

import pytest

from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.incidents.selectors import list_failure_history
from controlplane.apps.training.models import TrainingTask
from tests.e2e.loop import TINY_GPT, Loop, draw_next_rendezvous_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]


def _iteration(task: TrainingTask) -> int:
    task.refresh_from_db()
    return int(task.iteration)


def test_a_taken_rendezvous_port(loop: Loop) -> None:
    loop.restart_worker(
        UNICRON_RESUME_DEADLINE_S="150", UNICRON_STEP_DEADLINE_S="60", UNICRON_CHECKPOINT_INTERVAL="0"
    )
    node = loop.add_node(1, worker="megatron")
    loop.wait_nodes_healthy(1)
    port, squatter = draw_next_rendezvous_port(squat=True)
    assert squatter is not None
    try:
        task = loop.submit("port", TINY_GPT, min_workers=1, max_workers=1, total_iterations=100000)
        taken = loop.wait(
            "rank 0's report of the taken port",
            lambda: FailureEvent.objects.filter(task=task, kind="rendezvous_port_in_use").first(),
            timeout=150,
        )
        assert (taken.severity, taken.action) == ("sev3", "retry_in_place")
        running = loop.wait_running(task, epoch_above=int(taken.task_epoch or 0), timeout=180)
        assert running.kind == "retry"
        assert running.rendezvous_port != port
        loop.wait("iterations at the fresh port", lambda: _iteration(task) > 3, 120)
    finally:
        squatter.close()
    events = list(FailureEvent.objects.filter(task=task, task_epoch=taken.task_epoch))
    assert {e.detector for e in events} >= {"exception_propagation", "process_supervision"}  # it exited too
    assert {e.evidence["classification"]["blame"] for e in events} == {"consequence"}, [
        (e.kind, e.severity, e.evidence["classification"]) for e in events
    ]
    device = Device.objects.get(node=node, index=0)
    assert (device.error_count, device.sev2_count, device.sev1_count) == (0, 0, 0)
    node = Node.objects.get(pk=node.pk)
    assert list_failure_history(node, 3600.0) == []
    assert node.state == "healthy"
    assert not node.quarantined
