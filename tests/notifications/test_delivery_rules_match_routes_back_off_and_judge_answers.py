"""The pure rules of routing and retrying (controlplane.apps.notifications.rules)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.apps.notifications.rules import (
    Verdict,
    backoff_s,
    http_verdict,
    next_step,
    route_matches,
    severities_matched,
)


@pytest.mark.parametrize(
    ("min_severity", "severities", "expected"),
    [
        ("", [], ["sev1", "sev2", "sev3"]),
        ("sev1", [], ["sev1"]),
        ("sev2", [], ["sev1", "sev2"]),
        ("", ["sev2", "sev3"], ["sev2", "sev3"]),
        ("sev2", ["sev2", "sev3"], ["sev2"]),
        ("sev1", ["sev3"], []),
    ],
)
def test_a_minimum_and_a_set_together_take_these_severities(
    min_severity: str, severities: list[str], expected: list[str]
) -> None:
    assert severities_matched(min_severity, severities) == expected


def test_kinds_narrow_a_route_and_an_alert_without_a_kind_only_reaches_routes_without_kinds() -> None:
    assert route_matches("", [], ["node_lost"], "sev1", "node_lost")
    assert not route_matches("", [], ["node_lost"], "sev1", "cuda_error")
    assert not route_matches("", [], ["node_lost"], "sev1", "")
    assert route_matches("", [], [], "sev1", "")


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        (200, Verdict.SENT),
        (204, Verdict.SENT),
        (500, Verdict.RETRY),
        (503, Verdict.RETRY),
        (429, Verdict.RETRY),
        (408, Verdict.RETRY),
        (400, Verdict.PERMANENT),
        (401, Verdict.PERMANENT),
        (404, Verdict.PERMANENT),
        (301, Verdict.PERMANENT),
    ],
)
def test_an_answer_is_sent_retried_or_a_permanent_failure(status: int, verdict: Verdict) -> None:
    assert http_verdict(status) is verdict


def test_the_backoff_doubles_from_the_base_up_to_the_cap() -> None:
    assert [backoff_s(n, 5.0, 60.0) for n in range(1, 7)] == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0]


@given(attempt=st.integers(1, 50), base=st.floats(0.0, 100.0), cap=st.floats(0.0, 1000.0))
def test_the_backoff_never_exceeds_the_cap_and_never_shrinks(attempt: int, base: float, cap: float) -> None:
    assert backoff_s(attempt, base, cap) <= cap
    assert backoff_s(attempt + 1, base, cap) >= backoff_s(attempt, base, cap)


def test_a_transient_failure_on_the_last_attempt_is_final() -> None:
    assert next_step(Verdict.RETRY, 2, 3, 1.0, 10.0).retry_in_s == 2.0
    assert next_step(Verdict.RETRY, 3, 3, 1.0, 10.0).verdict is Verdict.PERMANENT
    assert next_step(Verdict.PERMANENT, 1, 3, 1.0, 10.0).verdict is Verdict.PERMANENT
    assert next_step(Verdict.SENT, 3, 3, 1.0, 10.0).verdict is Verdict.SENT
