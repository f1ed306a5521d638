"""Metric series are averaged per time bucket in SQL, at most ``max_points`` buckets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rest_framework.test import APIClient

from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.metrics.selectors import list_series
from tests.controlplane.factories import TaskFactory

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _cluster_samples(n: int) -> None:
    MetricSample.objects.bulk_create(
        MetricSample(kind="cluster_waf", value=float(i), at=T0 + timedelta(seconds=i)) for i in range(n)
    )


def test_a_thousand_samples_become_ten_bucket_averages(db: None) -> None:
    _cluster_samples(1000)

    series = list_series("cluster_waf", None, T0, T0 + timedelta(seconds=1000), max_points=10)

    assert len(series.points) == 10
    assert series.bucket_seconds == 100.0
    for b, point in enumerate(series.points):
        assert point.at == T0 + timedelta(seconds=100 * b)
        assert point.count == 100
        assert point.value == sum(range(100 * b, 100 * b + 100)) / 100
        assert (point.min, point.max) == (100 * b, 100 * b + 99)


def test_a_sample_exactly_at_until_lands_in_the_last_bucket(db: None) -> None:
    _cluster_samples(11)  # 0..10 s

    series = list_series("cluster_waf", None, T0, T0 + timedelta(seconds=10), max_points=2)

    assert [p.count for p in series.points] == [5, 6]


def test_the_api_filters_by_time_range_and_task(db: None, viewer_client: APIClient) -> None:
    task, other = TaskFactory(), TaskFactory()
    for t, value in ((task, 2.0), (other, 100.0)):
        MetricSample.objects.bulk_create(
            MetricSample(task=t, kind="tokens_per_s", value=value, at=T0 + timedelta(seconds=i))
            for i in range(60)
        )
    since, until = T0 + timedelta(seconds=10), T0 + timedelta(seconds=29)

    response = viewer_client.get(
        f"/api/v1/metrics/tasks/{task.pk}/",
        {"kind": "tokens_per_s", "since": since.isoformat(), "until": until.isoformat(), "max_points": 4},
    )

    assert response.status_code == 200
    points = response.json()["points"]
    assert len(points) == 4
    assert sum(p["count"] for p in points) == 20
    assert {p["value"] for p in points} == {2.0}


def test_the_api_refuses_an_inverted_range(db: None, viewer_client: APIClient) -> None:
    response = viewer_client.get(
        "/api/v1/metrics/cluster/", {"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}
    )

    assert response.status_code == 400
    assert "until" in response.json()
