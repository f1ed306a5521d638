"""A collection holds a server process whole: one longer than the threshold is logged, so a pause of a daphne
process shows in its log; the clock is registered once however often the process starts up."""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator

import pytest

from controlplane.config.heap import _CollectionClock, log_long_collections


@pytest.fixture(autouse=True)
def _own_clock() -> Iterator[None]:
    before = list(gc.callbacks)
    gc.callbacks[:] = [cb for cb in before if not isinstance(cb, _CollectionClock)]
    yield
    gc.callbacks[:] = before


def test_a_collection_longer_than_the_threshold_is_logged_with_its_generation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log_long_collections(threshold_s=0.0)
    log_long_collections(threshold_s=0.0)  # a second start-up hook of the same process
    assert sum(isinstance(cb, _CollectionClock) for cb in gc.callbacks) == 1

    with caplog.at_level(logging.WARNING, logger="controlplane.config.heap"):
        gc.collect(2)

    [line] = [r.getMessage() for r in caplog.records if r.name == "controlplane.config.heap"]
    assert line.startswith("garbage collection of generation 2 took "), line
    assert " ms of CPU (" in line, line


def test_a_short_collection_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    log_long_collections(threshold_s=60.0)
    with caplog.at_level(logging.WARNING, logger="controlplane.config.heap"):
        gc.collect(0)
    assert not [r for r in caplog.records if r.name == "controlplane.config.heap"]
