"""metrics.sample_cluster_waf: achieved cluster WAF = Σ w(t) x the mean of each running task's recent
achieved-FLOP/s samples; written with the healthy-cluster optimum and goodput, then sent live."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane.apps.common import broadcast
from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.metrics.selectors import WAF_WINDOW_S
from controlplane.apps.metrics.tasks import sample_cluster_waf_now
from controlplane.apps.training.models import TrainingTask
from tests.controlplane.factories import NodeFactory, TaskFactory

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    monkeypatch.setattr(broadcast, "_send", events.append)
    return events


def _flops(task: TrainingTask, value: float, age_s: float) -> None:
    MetricSample.objects.create(
        task=task, kind="achieved_flops", value=value, at=NOW - timedelta(seconds=age_s)
    )


def test_each_running_task_adds_its_weight_times_its_recent_mean_rate(
    db: None, sent: list[dict[str, Any]], django_capture_on_commit_callbacks: Any
) -> None:
    NodeFactory(devices=2)
    a = TaskFactory(state="running", weight=2.0)
    b = TaskFactory(state="running", weight=1.0)
    reconfiguring = TaskFactory(state="reconfiguring", weight=5.0)
    for v, age in [(0.8e12, 1), (1.2e12, 4)]:
        _flops(a, v, age)
    _flops(b, 3e12, 2)
    _flops(b, 100e12, WAF_WINDOW_S + 5)  # too old to be "now"
    _flops(reconfiguring, 7e12, 1)  # from before its failure: not achieved now

    with django_capture_on_commit_callbacks(execute=True):
        sample = sample_cluster_waf_now(NOW)

    assert sample.achieved == pytest.approx(2.0 * 1e12 + 1.0 * 3e12)
    rows = {r.kind: r for r in MetricSample.objects.filter(task__isnull=True)}
    assert rows["cluster_waf"].value == pytest.approx(5e12)
    assert rows["cluster_waf"].at == NOW
    assert rows["optimal_waf"].value == pytest.approx(sample.optimum)
    assert sample.optimum > 0
    events = [e for e in sent if e["kind"] == "waf.sample"]
    assert len(events) == 1
    assert events[0]["payload"]["achieved"] == pytest.approx(5e12)
    assert events[0]["payload"]["optimum"] == pytest.approx(sample.optimum)


def test_with_no_running_task_the_achieved_waf_is_zero_and_no_goodput_is_written(db: None) -> None:
    NodeFactory(devices=2)
    TaskFactory(state="pending")

    sample = sample_cluster_waf_now(NOW)

    assert sample.achieved == 0.0
    assert sample.goodput is None
    assert not MetricSample.objects.filter(kind="goodput").exists()
    assert MetricSample.objects.filter(kind="cluster_waf", value=0.0).count() == 1
