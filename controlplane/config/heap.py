"""What a server process holds from its start, moved out of the garbage collector's way.

CPython's cyclic collector traverses every tracked object at each full collection, and the allocations of
ordinary work trigger one every so often. A Celery worker holds some 160,000 objects from its start
(modules, the app registry, settings, URL patterns), none of which is ever garbage, and a decision at
2,048 nodes allocates 100,000 short-lived ones: the full collections they triggered traversed the
start-up objects each time. Reading the cluster for a decision at 2,048 nodes (16,384 devices) took
223 to 249 ms at the median, 128 to 131 ms with the start-up objects frozen (``gc.freeze``: kept out of every
later collection, never freed).

Each daphne process freezes once its ASGI application is built; each Celery process that runs tasks once
it is initialised (a prefork pool's child after the fork, the main process of a solo or threads pool).
"""

from __future__ import annotations

import gc


def freeze_startup_objects() -> int:
    """Collect the garbage of the start, then freeze every object left; returns how many are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
