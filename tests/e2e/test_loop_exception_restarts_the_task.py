"""An exception in the training code (sim agents): exception propagation → sev2 → restart on the same
devices; the rank's exit that follows its report does not count as a second failure."""

from __future__ import annotations

import pytest

from controlplane.apps.incidents.models import FailureEvent
from tests.e2e.loop import Loop, fault_and_recover

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_exception(loop: Loop) -> None:
    r = fault_and_recover(loop, "exception", "exception_propagation")
    assert r.event.severity == "sev2"
    assert r.event.action == "restart_processes"
    assert r.transition.kind == "restart"
    assert r.transition.failure_event_id == r.event.pk
    exits = FailureEvent.objects.filter(task_epoch=r.epoch_before, detector="process_supervision")
    assert all(e.handled_by_id == r.event.pk for e in exits)  # absorbed, not acted on
