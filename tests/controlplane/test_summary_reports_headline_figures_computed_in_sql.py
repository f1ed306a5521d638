"""GET /api/v1/summary/ (viewer): the overview's headline figures, computed server-side."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.planning.models import Transition
from tests.controlplane.factories import FailureEventFactory, TransitionFactory


def _event(hours_ago: float, latency_s: float, severity: str = "sev2") -> FailureEvent:
    detected = timezone.now() - timedelta(hours=hours_ago)
    return FailureEventFactory(
        detected_at=detected, occurred_at=detected - timedelta(seconds=latency_s), severity=severity
    )


def _transition(hours_ago: float, duration_s: float, state: str = "completed") -> Transition:
    finished = timezone.now() - timedelta(hours=hours_ago)
    return TransitionFactory(
        state=state, started_at=finished - timedelta(seconds=duration_s), finished_at=finished
    )


def test_summary_figures(db: None, viewer_client: APIClient) -> None:
    now = timezone.now()
    for kind, values in [("cluster_waf", [5e15, 4e15]), ("optimal_waf", [6e15, 8e15])]:
        for i, v in enumerate(values):
            MetricSample.objects.create(kind=kind, value=v, at=now - timedelta(seconds=10 - 5 * i))
    primary = _event(0.2, 0.5, "sev1")
    _event(0.5, 1.5)
    _event(3, 4.0, "sev3")
    _event(30, 100.0)  # older than a day
    absorbed = _event(0.2, 50.0)  # a peer's view of the same failure, handled by the primary
    FailureEvent.objects.filter(pk=absorbed.pk).update(handled_by=primary)
    _transition(1, 10.0)
    _transition(5, 20.0)
    _transition(2, 500.0, state="failed")
    _transition(40, 900.0)

    response = viewer_client.get("/api/v1/summary/")

    assert response.status_code == 200
    s = response.json()
    assert s["waf"]["value"] == 4e15
    assert s["optimum"]["value"] == 8e15
    assert s["share_of_optimum"] == pytest.approx(0.5)
    assert (s["failures_1h"], s["failures_24h"]) == (2, 3)
    assert s["failures_24h_by_severity"] == {"sev1": 1, "sev2": 1, "sev3": 1}
    assert s["mean_detection_latency_s"] == pytest.approx(2.0, abs=1e-3)
    assert s["mean_transition_s"] == pytest.approx(15.0, abs=1e-3)
    assert s["transitions_24h"] == 2
    assert s["goodput_1h"] is None  # no task ran


def test_an_empty_cluster_has_no_figures_yet(db: None, viewer_client: APIClient) -> None:
    s = viewer_client.get("/api/v1/summary/").json()

    assert (s["waf"], s["optimum"], s["share_of_optimum"]) == (None, None, None)
    assert (s["failures_1h"], s["failures_24h"], s["failures_24h_by_severity"]) == (0, 0, {})
    assert (s["mean_detection_latency_s"], s["mean_transition_s"]) == (None, None)


def test_anonymous_callers_get_no_summary(db: None) -> None:
    assert APIClient().get("/api/v1/summary/").status_code == 401
