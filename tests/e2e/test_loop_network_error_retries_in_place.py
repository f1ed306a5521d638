"""A transient network error (sim agents): exception propagation → sev3 → retry in place at a new
epoch and rendezvous, on the same devices."""

from __future__ import annotations

import pytest

from controlplane.apps.fleet.models import AgentCommand
from tests.e2e.loop import Loop, fault_and_recover

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_network_error(loop: Loop) -> None:
    r = fault_and_recover(loop, "network_error", "exception_propagation")
    assert r.event.severity == "sev3"
    assert r.event.action == "retry_in_place"
    assert r.transition.kind == "retry"
    retries = AgentCommand.objects.filter(transition=r.transition, type="retry")
    assert retries.count() == 2  # every node of the task
    ports = {c.payload["rendezvous"]["master_port"] for c in retries}
    assert ports == {r.transition.rendezvous_port}
    launch = AgentCommand.objects.filter(task=r.task, type="start_workers").first()
    assert launch is not None
    assert launch.payload["launch"]["rendezvous"]["master_port"] != r.transition.rendezvous_port
