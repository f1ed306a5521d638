"""Precomputed plans every control-plane process can read.

After each decision one Celery process precomputes the plans of the likely next events (each node's loss,
a node's return, a task's completion: :mod:`controlplane.core.planning.precompute`). The failure that
follows may be handled by another Celery process, or decided in the ASGI server: the plans therefore live
in Redis, each under its problem's digest (:func:`controlplane.core.planning.codec.problem_digest`), as JSON.
A plan is a pure function of its problem, so a stored plan is never stale; entries expire after
``UNICRON_PRECOMPUTED_TTL_S`` (default 3600 s) only to bound memory. Each process also keeps the plans it
built or fetched last (its first-level cache). Redis unreachable → a miss: the caller runs the DP.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from functools import cache

import redis
from django.conf import settings

from controlplane.config.env import env_int
from controlplane.core.planning import PlannedAllocation, PlanningProblem
from controlplane.core.planning.codec import plan_from_dict, plan_to_dict, problem_digest

log = logging.getLogger(__name__)

KEY_PREFIX = "unicron:precomputed:"


@cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1.0, socket_connect_timeout=1.0)


def ttl_s() -> int:
    return env_int("UNICRON_PRECOMPUTED_TTL_S", 3600, minimum=60)


class SharedPlans:
    """Plans by problem: this process's own last build first, then the shared store."""

    def __init__(self) -> None:
        self.local: dict[PlanningProblem, PlannedAllocation] = {}
        self.build_ms = 0.0
        self.shared_hits = 0

    def lookup(self, problem: PlanningProblem) -> PlannedAllocation | None:
        found = self.local.get(problem)
        if found is not None:
            return found
        try:
            raw = _redis().get(KEY_PREFIX + problem_digest(problem))
        except redis.RedisError as exc:
            log.warning("precomputed plans unavailable (%s): planning afresh", exc)
            return None
        if raw is None:
            return None
        try:
            found = plan_from_dict(json.loads(raw))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("a stored precomputed plan could not be read (%s): planning afresh", exc)
            return None
        self.local[problem] = found
        self.shared_hits += 1
        return found

    def publish(self, plans: Mapping[PlanningProblem, PlannedAllocation], build_ms: float) -> None:
        """Keep ``plans`` as this process's cache and store them for every other process."""
        self.local = dict(plans)
        self.build_ms = build_ms
        try:
            with _redis().pipeline(transaction=False) as pipe:
                for problem, answer in plans.items():
                    pipe.set(
                        KEY_PREFIX + problem_digest(problem), json.dumps(plan_to_dict(answer)), ex=ttl_s()
                    )
                pipe.execute()
        except redis.RedisError as exc:
            log.warning("precomputed plans not shared (%s): other processes will plan afresh", exc)
