"""A straggler (sim agents): online statistical monitoring → sev1 → the device is isolated and every
task re-planned; the task continues without that device."""

from __future__ import annotations

import pytest

from controlplane.apps.fleet.models import Device
from controlplane.apps.training.models import Allocation
from tests.e2e.loop import Loop, fault_and_recover

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_straggler(loop: Loop) -> None:
    r = fault_and_recover(loop, "straggler", "statistical_monitoring", slowdown=6.0, timeout=120)
    assert r.event.kind == "straggler"
    assert r.event.severity == "sev1"
    assert r.event.action == "isolate_and_replan"
    assert r.transition.kind in ("reconfigure", "launch")
    assert r.transition.plan.trigger == "failure"
    slow = Device.objects.get(pk=r.event.device_id)
    assert slow.state == "isolated"
    assert not Allocation.objects.filter(task=r.task, active=True, device=slow).exists()
