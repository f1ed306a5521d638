"""The failure path's own database thread in each ASGI process.

The agent links of one process run their database calls on one shared thread
(``database_sync_to_async``): hellos, heartbeats that change a node's state, acknowledgements, the stored
batches of iteration stats. A cold start of a fleet or a burst of acknowledgements queues seconds of
them, and a failure report, or the outbox read that sends the commands of a failure's answer, waited its
turn behind them.

What a failure's answer waits on runs on this thread instead, with a PostgreSQL connection of its own
(kept as ``CONN_MAX_AGE`` says, like the shared thread's): the failure evidence stored, and a woken link's
outbox read and its sends settled. A link's own order is unchanged: its sequenced work
(:mod:`controlplane.live.sequenced_work`) runs one item at a time, whichever thread an item's call takes.
Each process holds one more database connection for it (``docs/DEPLOY.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar, cast

from channels.db import database_sync_to_async
from django.db import connections

P = ParamSpec("P")
R = TypeVar("R")

THREAD_NAME = "failure-lane"

_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=THREAD_NAME)


def on_failure_lane(func: Callable[P, R]) -> Callable[P, Coroutine[Any, Any, R]]:
    """``func`` as an awaitable run on the failure lane's thread (stale connections closed before and
    after, as ``database_sync_to_async`` does)."""
    lane = database_sync_to_async(func, thread_sensitive=False, executor=_executor)
    return cast(Callable[P, Coroutine[Any, Any, R]], lane)


def close_lane_connection() -> None:
    """Close the lane's database connection now (a database is dropped only when no session is open on
    it: a test run's, at its end)."""
    _executor.submit(connections.close_all).result()
