"""A hang (sim agents): online statistical monitoring → sev3 → retry in place; the agent's kill of the
hung worker is absorbed by the hang verdict."""

from __future__ import annotations

import pytest

from tests.e2e.loop import Loop, fault_and_recover

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_hang(loop: Loop) -> None:
    r = fault_and_recover(loop, "hang", "statistical_monitoring")
    assert r.event.kind == "hang"
    assert r.event.severity == "sev3"
    assert r.event.action == "retry_in_place"
    assert r.transition.kind == "retry"
