"""Real Megatron-Core workers retried in place after a network error, at a rendezvous port another process
listens on: rank 0 cannot open its ``TCPStore`` (``EADDRINUSE``), reports it and waits with its state
instead of exiting; the control plane retries again at a fresh port (a taken port is never escalated) and
both ranks train on in the same processes. No worker exits, and nothing counts against the device or the
node."""

from __future__ import annotations

import pytest
from django.db.models import Q

from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.incidents.selectors import list_failure_history
from controlplane.apps.training.models import TrainingTask
from tests.e2e.loop import TINY_GPT, Loop, draw_next_rendezvous_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]


def _iteration(task: TrainingTask) -> int:
    task.refresh_from_db()
    return int(task.iteration)


def test_a_survivor_whose_new_port_is_taken(loop: Loop) -> None:
    # Rank 1 dials the squatter as its store and waits for an answer until the rendezvous timeout, kept short
    # for that; both ranks come from warm spares, so that the launch's rendezvous is quick on a loaded host.
    loop.restart_worker(
        UNICRON_RESUME_DEADLINE_S="150",
        UNICRON_STEP_DEADLINE_S="60",
        UNICRON_CHECKPOINT_INTERVAL="0",
        UNICRON_RENDEZVOUS_TIMEOUT_S="20",
    )
    loop.env["UNICRON_SPARES"] = "2"
    node = loop.add_node(2, worker="megatron")
    loop.wait_nodes_healthy(1)
    draw_next_rendezvous_port()  # the launch's port: clear of the ports other runs on this host hold
    task = loop.submit("port2", TINY_GPT, min_workers=2, max_workers=2, total_iterations=100000)
    loop.wait_running(task, timeout=150)
    loop.wait("some iterations", lambda: _iteration(task) > 3, 120)
    task.refresh_from_db()
    epoch, before = task.epoch, task.iteration
    port, squatter = draw_next_rendezvous_port(squat=True)
    assert squatter is not None
    try:
        loop.inject(task, "network_error", rank=1)
        taken = loop.wait(
            "rank 0's report of the taken port",
            lambda: FailureEvent.objects.filter(task=task, kind="rendezvous_port_in_use").first(),
            timeout=120,
        )
        assert (taken.severity, taken.action) == ("sev3", "retry_in_place")
        assert taken.evidence["report"]["event"]["waiting"] is True, taken.evidence  # alive, with its state
        running = loop.wait_running(task, epoch_above=int(taken.task_epoch or 0), timeout=180)
        assert running.kind == "retry"
        assert running.rendezvous_port != port
        loop.wait("iterations past the failure", lambda: _iteration(task) > before + 3, 120)
    finally:
        squatter.close()
    assert int(taken.task_epoch or 0) > epoch
    events = FailureEvent.objects.filter(Q(task=task) | Q(node=node))
    assert not events.filter(detector="process_supervision").exists(), [
        (e.kind, e.task_epoch, e.evidence["report"]) for e in events.filter(detector="process_supervision")
    ]
    assert {
        e.evidence.get("classification", {}).get("blame") for e in events.exclude(detector="orchestrator")
    } <= {"consequence"}
    device = Device.objects.filter(node=node)
    assert sorted(device.values_list("error_count", "sev2_count", "sev1_count")) == [(0, 0, 0), (0, 0, 0)]
    assert list_failure_history(Node.objects.get(pk=node.pk), 3600.0) == []
