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

Each daphne process freezes once its ASGI application is built; each Celery process that runs tasks once
it is initialised (a prefork pool's child after the fork, the main process of a solo or threads pool).
"""

from __future__ import annotations

import gc


def freeze_startup_objects() -> None:
    """Collect the garbage of the start, then freeze every object left."""
    gc.collect()
    gc.freeze()
