"""The plans of the likely next events, precomputed after each decision for the state as it then is and shared
with every control-plane process through Redis (:mod:`controlplane.apps.planning.plan_store`), so that the
failure that follows is a lookup whichever process handles it.

The refresh runs as a task of its own (``planning.refresh_precomputed``), never inside the failure handling
or the re-plan that asked for it: at 2,048 nodes with 64 tasks it plans some 2,100 events (about 125
distinct problems of the whole fleet). One DP per problem took 12-32 s of a Celery process there, and run
inline it held the process that handled a node loss (with two such, the whole worker: the node-health
sweeps waited); read from one split DP (:mod:`controlplane.core.planning.split_dp`) it takes about 1 s.
Requests are coalesced: at most one refresh is queued or running; a request made while one runs makes it
queue one more refresh, for the state as it is then, behind the tasks queued meanwhile (a stream of re-plans
does not hold a Celery process). A refresh is keyed by the problem it answers, so a stale or missing one is
never a wrong answer: the next decision plans afresh.
"""

from __future__ import annotations

import logging
from functools import cache

import redis

from controlplane.apps.common.triggers import orchestration_redis, send_precomputed_refresh
from controlplane.apps.planning.plan_store import SharedPlans
from controlplane.apps.planning.selectors import (
    cluster_state_of,
    load_cluster,
)
from controlplane.core.planning import PrecomputedPlans
from controlplane.core.planning import plan as dp_plan

log = logging.getLogger(__name__)


@cache
def precomputed() -> SharedPlans:
    return SharedPlans()


def refresh_precomputed() -> None:
    """Precompute the plans of the state as it is now (after a decision committed its allocations) and
    share them with every process."""
    try:
        state = cluster_state_of(load_cluster())
        cache_ = precomputed()
        pre = PrecomputedPlans.build(state, cache=cache_.local)
        plans = dict(pre.by_problem)
        plans.setdefault(state.problem, cache_.local.get(state.problem) or dp_plan(state.problem))
        cache_.publish(plans, pre.build_time_s * 1000.0)
    except Exception:  # never let an optimisation break the decision that preceded it
        log.exception("precomputing plans failed")


REFRESH_WANTED_KEY = "unicron:precomputed:refresh-wanted"
"""Set by every request; cleared by the refresh that starts after it."""
REFRESH_QUEUED_KEY = "unicron:precomputed:refresh-queued"
"""Held while a refresh is queued or running (expires, so a lost message cannot block refreshes for long)."""
REFRESH_QUEUED_TTL_S = 600


def request_precomputed_refresh() -> None:
    """Ask for the precomputed plans of the state as it is now (after a decision committed): one
    ``planning.refresh_precomputed`` message unless one is queued or running already. Redis unreachable:
    refreshed here and now, as before the requests were coalesced."""
    try:
        client = orchestration_redis()
        client.set(REFRESH_WANTED_KEY, "1")
        if not client.set(REFRESH_QUEUED_KEY, "1", nx=True, ex=REFRESH_QUEUED_TTL_S):
            return  # the queued or running refresh takes this request
    except redis.RedisError as exc:
        log.warning("precomputed-plan refresh not coalesced (%s): refreshing now", exc)
        refresh_precomputed()
        return
    send_precomputed_refresh()


def do_refresh_precomputed() -> bool:
    """The ``planning.refresh_precomputed`` task: one refresh, then, when a request came in meanwhile (it
    wants the state after this one), one more message at the back of the queue, so that the sweeps and
    failure handlings queued meanwhile run before it (a stream of re-plans would otherwise hold a Celery
    process refreshing back to back). Returns whether another refresh was queued."""
    client = orchestration_redis()
    client.delete(REFRESH_WANTED_KEY)
    refresh_precomputed()
    if not client.get(REFRESH_WANTED_KEY):
        client.delete(REFRESH_QUEUED_KEY)
        # a request between the two reads saw the refresh queued and sent nothing: it is taken here
        if not client.get(REFRESH_WANTED_KEY) or not client.set(
            REFRESH_QUEUED_KEY, "1", nx=True, ex=REFRESH_QUEUED_TTL_S
        ):
            return False
    client.expire(REFRESH_QUEUED_KEY, REFRESH_QUEUED_TTL_S)
    send_precomputed_refresh()
    return True
