"""``make demo`` on a host with fewer cores than demo workers relaxes the node-health deadlines (CPU-starved
agents missed 3 s and every node was declared lost at once while the workers started), binds each task's
workers to a core and raises the straggler ratio (uneven kernel sharing made false stragglers), each
unless the operator chose it; on a big enough host it changes nothing."""

from __future__ import annotations

import os
from collections.abc import Iterator

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
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in VARS:
        monkeypatch.delenv(name, raising=False)
    yield
    for name in VARS:  # it writes os.environ itself (the demo's children inherit it): leave no trace
        os.environ.pop(name, None)


@pytest.mark.usefixtures("clean_env")
def test_an_oversubscribed_host_gets_every_adaptation() -> None:
    said = fit_small_host(workers=8, cores=2)
    assert len(said) == 4
    assert os.environ["UNICRON_WORKER_NICE"] == "10"
    assert "8 workers on 2 cores" in said[0]
    assert float(os.environ["UNICRON_LOST_AFTER_S"]) == OVERSUBSCRIBED_LOST_AFTER_S
    assert os.environ["UNICRON_CPU_BIND"] == "task"
    assert float(os.environ["UNICRON_STRAGGLER_RATIO"]) == OVERSUBSCRIBED_STRAGGLER_RATIO


@pytest.mark.usefixtures("clean_env")
def test_the_operators_choice_and_a_big_host_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNICRON_LOST_AFTER_S", "3")
    monkeypatch.setenv("UNICRON_CPU_BIND", "none")
    monkeypatch.setenv("UNICRON_WORKER_NICE", "0")
    said = fit_small_host(workers=8, cores=2)
    assert said == [said[0]]
    assert "straggler ratio" in said[0]
    assert os.environ["UNICRON_LOST_AFTER_S"] == "3"
    assert "UNICRON_SUSPECT_AFTER_S" not in os.environ
    assert os.environ["UNICRON_CPU_BIND"] == "none"
    for name in VARS:
        os.environ.pop(name, None)
    assert fit_small_host(workers=8, cores=16) == []
    assert not any(name in os.environ for name in VARS)
