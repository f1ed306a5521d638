"""Pure rules of alert routing and delivery (no Django): which routes an alert matches, how long to wait
before the next attempt, and what an HTTP answer means for the delivery."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from enum import Enum

SEVERITY_ORDER: tuple[str, ...] = ("sev1", "sev2", "sev3")
"""Most severe first: sev1 (hardware / node), sev2 (process), sev3 (transient)."""


def unknown_severities(names: Collection[str]) -> list[str]:
    return sorted(set(names) - set(SEVERITY_ORDER))


def at_least_as_severe(severity: str, minimum: str) -> bool:
    return SEVERITY_ORDER.index(severity) <= SEVERITY_ORDER.index(minimum)


def severities_matched(min_severity: str, severities: Collection[str]) -> list[str]:
    """The severities a route with this minimum ("" for none) and set (empty for all) lets through."""
    return [
        s
        for s in SEVERITY_ORDER
        if (not min_severity or at_least_as_severe(s, min_severity)) and (not severities or s in severities)
    ]


def route_matches(
    min_severity: str, severities: Collection[str], kinds: Collection[str], severity: str, kind: str
) -> bool:
    """Does a route (minimum severity, severity set, alert kinds; empty means any) take this alert?"""
    if severity not in severities_matched(min_severity, severities):
        return False
    return not kinds or kind in kinds


def backoff_s(attempt: int, base_s: float, max_s: float) -> float:
    """Wait before attempt ``attempt + 1`` after ``attempt`` failed: base x 2^(attempt-1), capped."""
    return float(min(max_s, base_s * 2 ** max(attempt - 1, 0)))


class Verdict(Enum):
    SENT = "sent"
    RETRY = "retry"
    PERMANENT = "permanent"


RETRYABLE_4XX = frozenset({408, 425, 429})
"""4xx answers that mean 'later', not 'never': request timeout, too early, too many requests."""


def http_verdict(status: int) -> Verdict:
    """2xx sent; 5xx and 408/425/429 retry; any other answer (4xx, an unfollowed 3xx) fails for good."""
    if 200 <= status < 300:
        return Verdict.SENT
    if status >= 500 or status in RETRYABLE_4XX:
        return Verdict.RETRY
    return Verdict.PERMANENT


@dataclass(frozen=True)
class NextStep:
    verdict: Verdict
    retry_in_s: float | None = None


def next_step(verdict: Verdict, attempt: int, max_attempts: int, base_s: float, max_s: float) -> NextStep:
    """After attempt number ``attempt`` ended with ``verdict``: done, retry after a backoff, or give up."""
    if verdict is Verdict.RETRY:
        if attempt >= max_attempts:
            return NextStep(Verdict.PERMANENT)
        return NextStep(Verdict.RETRY, backoff_s(attempt, base_s, max_s))
    return NextStep(verdict)
