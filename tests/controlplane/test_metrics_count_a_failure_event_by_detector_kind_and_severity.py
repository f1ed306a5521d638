"""/metrics: every stored failure event counts once in ``unicron_failure_events_total`` under its
detector, kind and severity, and its detection latency (occurred -> detected) lands in the
detector's histogram bucket."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from controlplane.apps.metrics.exposition import render_exposition
from tests.controlplane.factories import FailureEventFactory


def _samples() -> list[Sample]:
    text = render_exposition().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def _value(samples: list[Sample], name: str, **labels: str) -> float:
    hits = [
        s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(hits) <= 1, (name, labels, hits)
    return hits[0] if hits else 0.0


def test_a_failure_event_increments_its_counter_and_latency_bucket(db: None) -> None:
    exit_labels = {"detector": "process_supervision", "kind": "worker_exited", "severity": "sev2"}
    FailureEventFactory(**exit_labels)
    before = _samples()
    assert _value(before, "unicron_failure_events_total", **exit_labels) == 1.0

    now = timezone.now()
    FailureEventFactory(
        detector="node_health",
        kind="node_lost",
        severity="sev1",
        occurred_at=now - timedelta(seconds=2.5),
        detected_at=now,
    )
    FailureEventFactory(**exit_labels)
    after = _samples()

    assert _value(after, "unicron_failure_events_total", **exit_labels) == 2.0
    lost = {"detector": "node_health", "kind": "node_lost", "severity": "sev1"}
    assert _value(before, "unicron_failure_events_total", **lost) == 0.0
    assert _value(after, "unicron_failure_events_total", **lost) == 1.0
    latency = "unicron_failure_detection_latency_seconds"
    assert _value(after, f"{latency}_bucket", detector="node_health", le="2.0") == 0.0
    assert _value(after, f"{latency}_bucket", detector="node_health", le="3.0") == 1.0
    assert _value(after, f"{latency}_bucket", detector="node_health", le="+Inf") == 1.0
    assert abs(_value(after, f"{latency}_sum", detector="node_health") - 2.5) < 1e-3
    assert _value(after, f"{latency}_count", detector="process_supervision") == 2.0
