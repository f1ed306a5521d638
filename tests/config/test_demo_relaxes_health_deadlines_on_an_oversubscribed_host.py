"""``make demo`` on a host with fewer cores than demo workers relaxes the node-health deadlines (CPU-starved
agents missed 3 s and every node was declared lost at once while the workers started), unless the
operator chose them; on a big enough host it changes nothing."""

from __future__ import annotations

import os

import pytest

from controlplane.config.demo import OVERSUBSCRIBED_LOST_AFTER_S, relax_health_deadlines


def test_an_oversubscribed_host_gets_relaxed_deadlines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UNICRON_LOST_AFTER_S", raising=False)
    monkeypatch.delenv("UNICRON_SUSPECT_AFTER_S", raising=False)
    try:
        said = relax_health_deadlines(workers=8, cores=2)
        assert "8 workers on 2 cores" in said
        assert float(os.environ["UNICRON_LOST_AFTER_S"]) == OVERSUBSCRIBED_LOST_AFTER_S
    finally:  # it writes os.environ itself (the demo's children inherit it): leave no trace
        os.environ.pop("UNICRON_LOST_AFTER_S", None)
        os.environ.pop("UNICRON_SUSPECT_AFTER_S", None)


def test_the_operators_choice_and_a_big_host_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNICRON_LOST_AFTER_S", "3")
    assert relax_health_deadlines(workers=8, cores=2) == ""
    monkeypatch.delenv("UNICRON_LOST_AFTER_S")
    monkeypatch.delenv("UNICRON_SUSPECT_AFTER_S", raising=False)
    assert relax_health_deadlines(workers=8, cores=16) == ""
    assert "UNICRON_LOST_AFTER_S" not in os.environ
