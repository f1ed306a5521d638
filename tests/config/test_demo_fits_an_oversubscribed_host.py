"""``make demo`` on a host with fewer cores than demo workers relaxes the node-health deadlines (CPU-starved
agents missed 3 s and every node was declared lost at once while the workers started), binds each task's
workers to a core and raises the straggler ratio (uneven kernel sharing made false stragglers), each
unless the operator chose it (in the environment); on a big enough host it changes nothing. The adaptations
are settings for the demo's children: the demo's own environment is left as it was."""

from __future__ import annotations

import os

import pytest

from controlplane.config.demo import (
    OVERSUBSCRIBED_LOST_AFTER_S,
    OVERSUBSCRIBED_STRAGGLER_RATIO,
    fit_small_host,
)

VARS = (
    "UNICRON_LOST_AFTER_S",
    "UNICRON_SUSPECT_AFTER_S",
    "UNICRON_CPU_BIND",
    "UNICRON_STRAGGLER_RATIO",
    "UNICRON_WORKER_NICE",
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("clean_env")
def test_an_oversubscribed_host_gets_every_adaptation() -> None:
    settings: dict[str, str] = {}
    said = fit_small_host(settings, workers=8, cores=2)
    assert len(said) == 4
    assert settings["UNICRON_WORKER_NICE"] == "10"
    assert "8 workers on 2 cores" in said[0]
    assert float(settings["UNICRON_LOST_AFTER_S"]) == OVERSUBSCRIBED_LOST_AFTER_S
    assert settings["UNICRON_CPU_BIND"] == "task"
    assert float(settings["UNICRON_STRAGGLER_RATIO"]) == OVERSUBSCRIBED_STRAGGLER_RATIO
    assert not any(name in os.environ for name in VARS)


@pytest.mark.usefixtures("clean_env")
def test_the_operators_choice_and_a_big_host_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNICRON_LOST_AFTER_S", "3")
    monkeypatch.setenv("UNICRON_CPU_BIND", "none")
    monkeypatch.setenv("UNICRON_WORKER_NICE", "0")
    settings: dict[str, str] = {}
    said = fit_small_host(settings, workers=8, cores=2)
    assert said == [said[0]]
    assert "straggler ratio" in said[0]
    assert settings == {"UNICRON_STRAGGLER_RATIO": str(OVERSUBSCRIBED_STRAGGLER_RATIO)}
    settings.clear()
    assert fit_small_host(settings, workers=8, cores=16) == []
    assert settings == {}
