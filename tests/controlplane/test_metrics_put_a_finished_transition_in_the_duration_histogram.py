"""/metrics: a transition lands in ``unicron_transition_duration_seconds`` (by kind and end state) once
it has finished, and its lost work adds to the lost-work counters."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from controlplane.apps.metrics.exposition import render_exposition
from controlplane.apps.planning.models import Transition
from tests.controlplane.factories import TransitionFactory


def _samples() -> list[Sample]:
    text = render_exposition().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def _value(samples: list[Sample], name: str, **labels: str) -> float:
    hits = [
        s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(hits) <= 1, (name, labels, hits)
    return hits[0] if hits else 0.0


def test_a_finished_transition_lands_in_its_duration_bucket(db: None) -> None:
    now = timezone.now()
    running = TransitionFactory(kind="restart", state="running", started_at=now - timedelta(seconds=7))
    labels = {"kind": "restart", "state": "completed"}
    hist = "unicron_transition_duration_seconds"
    before = _samples()
    assert _value(before, f"{hist}_count", **labels) == 0.0
    assert _value(before, f"{hist}_count", kind="restart", state="running") == 0.0  # not finished

    Transition.objects.filter(pk=running.pk).update(
        state="completed", finished_at=now, lost_work_s=4.25, lost_microbatches=3
    )
    TransitionFactory(
        kind="restart",
        state="completed",
        epoch=2,
        task=running.task,
        started_at=now - timedelta(seconds=40),
        finished_at=now,
        lost_work_s=0.75,
    )
    after = _samples()

    assert _value(after, f"{hist}_count", **labels) == 2.0
    assert _value(after, f"{hist}_bucket", le="5.0", **labels) == 0.0
    assert _value(after, f"{hist}_bucket", le="10.0", **labels) == 1.0
    assert _value(after, f"{hist}_bucket", le="30.0", **labels) == 1.0
    assert _value(after, f"{hist}_bucket", le="60.0", **labels) == 2.0
    assert abs(_value(after, f"{hist}_sum", **labels) - 47.0) < 1e-3
    assert _value(after, "unicron_lost_work_seconds_total") == 5.0
    assert _value(after, "unicron_lost_microbatches_total") == 3.0
