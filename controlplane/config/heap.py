"""What a server process holds from its start, moved out of the garbage collector's way.

CPython's cyclic collector traverses every tracked object at each full collection, and the allocations of
ordinary work trigger one every so often. A process of the control plane holds some 160,000 objects once
Django is set up (modules, the app registry, settings, URL patterns), none of which is ever garbage, and
reading the cluster for a decision at 2,048 nodes allocates a row, a slot and a pair per device (some
50,000 at 16,384 devices): the full collections they triggered traversed the start-up objects each time.
That read took 223 to 249 ms at the median, 128 to 131 ms with the start-up objects frozen
(``gc.freeze``: kept out of every later collection, never freed).

The agent's training worker does the same with its imports (``agents.training.worker.freeze_imports``);
the agents import nothing of the control plane's configuration, so each side keeps its two lines.

Each daphne process does all of this (:func:`prepare_server_heap`) once its ASGI application is built;
each Celery process that runs tasks once it is initialised (a prefork pool's child after the fork, the main
process of a solo or threads pool).

A collection holds the process whole (no frame is read, no task runs): each one that takes longer than
:data:`LONG_COLLECTION_S` is logged (:func:`log_long_collections`), so a pause of a daphne process shows in
its log beside the links' queueing delay.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

log = logging.getLogger(__name__)

LONG_COLLECTION_S = 0.05
"""A collection this long is logged (a heartbeat's suspect deadline is 2 s; the link's delay alert, 1 s)."""


YOUNG_COLLECTION_EVERY = 50_000
"""Net allocations between two collections of the youngest generation (CPython's default: 700)."""
MIDDLE_COLLECTION_EVERY = 20
"""Young collections between two of the middle generation (default: 10)."""


def prepare_server_heap() -> None:
    """What a server process does once it has started: log its long collections, freeze its start-up
    objects, collect its young generation less often."""
    log_long_collections()
    freeze_startup_objects()
    collect_young_less_often()


def freeze_startup_objects() -> None:
    """Collect the garbage of the start, then freeze every object left."""
    gc.collect()
    gc.freeze()


def collect_young_less_often() -> None:
    """A young collection every :data:`YOUNG_COLLECTION_EVERY` allocations, not every 700.

    A daphne process holding 1,024 agent links ran a full collection every ~15 s, each 200-240 ms of CPU
    (logged by :func:`log_long_collections`), during which it read no frame: the links' queueing delay had
    its p99 at 140-370 ms for a median of 0.3 ms. A full collection comes once enough objects have
    outlived two younger collections; with one every 700 allocations a frame's objects, alive for the
    few milliseconds of its handling, outlived them by the thousand a second. One every
    :data:`YOUNG_COLLECTION_EVERY` allocations leaves them the time to die young (each young collection
    then traverses at most that many objects: a few milliseconds)."""
    gc.set_threshold(YOUNG_COLLECTION_EVERY, MIDDLE_COLLECTION_EVERY, gc.get_threshold()[2])


class _CollectionClock:
    """Times each collection (``gc.callbacks``: called at its start and its stop)."""

    def __init__(self, threshold_s: float) -> None:
        self.threshold_s = threshold_s
        self._began = (0.0, 0.0)

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = (time.perf_counter(), time.thread_time())
            return
        took = time.perf_counter() - self._began[0]
        if took >= self.threshold_s:
            # the CPU time tells the collector's own work from the host's: a collection the scheduler
            # preempted holds the process as long, but a busier host, not more garbage, made it long
            log.warning(
                "garbage collection of generation %s took %.0f ms, %.0f ms of CPU (%s objects collected)",
                info.get("generation"),
                took * 1000,
                (time.thread_time() - self._began[1]) * 1000,
                info.get("collected"),
            )


def log_long_collections(threshold_s: float = LONG_COLLECTION_S) -> None:
    """Log each collection of this process that takes ``threshold_s`` or longer (once per process)."""
    if not any(isinstance(cb, _CollectionClock) for cb in gc.callbacks):
        gc.callbacks.append(_CollectionClock(threshold_s))
