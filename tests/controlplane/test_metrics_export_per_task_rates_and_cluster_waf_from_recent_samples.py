"""/metrics: per running or reconfiguring task, its newest achieved FLOP/s, tokens/s and iteration time
(younger than a minute; a task that stopped reporting or finished drops out), and the cluster's latest
WAF, healthy-cluster optimum and goodput samples."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from controlplane.apps.metrics.exposition import render_exposition
from tests.controlplane.factories import MetricSampleFactory, TaskFactory


def _samples() -> list[Sample]:
    text = render_exposition().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def _value(samples: list[Sample], name: str, **labels: str) -> float | None:
    hits = [
        s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(hits) <= 1, (name, labels, hits)
    return hits[0] if hits else None


def test_task_rates_come_from_each_tasks_newest_recent_sample(db: None) -> None:
    now = timezone.now()
    running = TaskFactory(state="running", name="gpt-small")
    stalled = TaskFactory(state="running", name="gpt-stalled")
    done = TaskFactory(state="completed", name="gpt-done")
    for kind, old, new in [
        ("achieved_flops", 1e12, 2e12),
        ("tokens_per_s", 900.0, 1000.0),
        ("iteration_time", 0.6, 0.5),
    ]:
        MetricSampleFactory(task=running, kind=kind, value=old, at=now - timedelta(seconds=3))
        MetricSampleFactory(task=running, kind=kind, value=new, at=now - timedelta(seconds=1))
        MetricSampleFactory(task=done, kind=kind, value=new, at=now - timedelta(seconds=1))
    MetricSampleFactory(task=stalled, kind="achieved_flops", value=5e12, at=now - timedelta(minutes=5))
    for kind, value in [("cluster_waf", 2e12), ("optimal_waf", 3e12), ("goodput", 0.9)]:
        MetricSampleFactory(kind=kind, value=value / 2, at=now - timedelta(seconds=6))
        MetricSampleFactory(kind=kind, value=value, at=now - timedelta(seconds=1))

    samples = _samples()

    task = {"task_id": str(running.pk), "task": "gpt-small"}
    assert _value(samples, "unicron_task_achieved_flops", **task) == 2e12
    assert _value(samples, "unicron_task_tokens_per_second", **task) == 1000.0
    assert _value(samples, "unicron_task_iteration_seconds", **task) == 0.5
    assert _value(samples, "unicron_task_achieved_flops", task_id=str(stalled.pk)) is None
    assert _value(samples, "unicron_task_achieved_flops", task_id=str(done.pk)) is None
    assert _value(samples, "unicron_cluster_waf_flops") == 2e12
    assert _value(samples, "unicron_cluster_optimal_waf_flops") == 3e12
    assert _value(samples, "unicron_cluster_goodput_ratio") == 0.9
    age = _value(samples, "unicron_cluster_waf_sample_age_seconds")
    assert age is not None
    assert 0.5 <= age <= 60.0
