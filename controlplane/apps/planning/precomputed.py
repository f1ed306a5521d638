"""The plans of the likely next events, precomputed after each decision for the state as it then is and shared
with every control-plane process through Redis (:mod:`controlplane.apps.planning.plan_store`), so that the
failure that follows is a lookup whichever process handles it."""

from __future__ import annotations

import logging
from functools import cache

from controlplane.apps.planning.plan_store import SharedPlans
from controlplane.apps.planning.selectors import (
    cluster_state_of,
    load_cluster,
)
from controlplane.core.planning import PrecomputedPlans, apply_event
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
        plans = {apply_event(state, ev): p for ev, p in pre.plans.items()}
        plans.setdefault(state.problem, cache_.local.get(state.problem) or dp_plan(state.problem))
        cache_.publish(plans, pre.build_time_s * 1000.0)
    except Exception:  # never let an optimisation break the decision that preceded it
        log.exception("precomputing plans failed")
