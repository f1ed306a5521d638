from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.metrics.choices import MetricKind
from controlplane.apps.metrics.ingest import record_iteration_stats
from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.core.protocol import IterationStats, WorkerReport
from tests.controlplane.factories import TaskFactory


def report(
    task: TrainingTask, rank: int, last: int, loss: float | None, validation_loss: float | None = None
) -> WorkerReport:
    now = timezone.now()
    stats = IterationStats(
        first_iteration=last - 9,
        last_iteration=last,
        iterations=10,
        median_s=0.1,
        max_s=0.2,
        compute_median_s=0.08,
        micro_batches=40,
        tokens=4096,
        model_flops=1e12,
        loss=loss,
        validation_loss=validation_loss,
        learning_rate=None if loss is None else 3e-4,
        grad_norm=None if loss is None else 0.5,
    )
    return WorkerReport(
        report_id=f"r-{rank}-{last}",
        task_id=str(task.pk),
        epoch=task.epoch,
        rank=rank,
        device=rank,
        detector=None,
        occurred_at=now - timedelta(seconds=1),
        detected_at=now,
        event=stats,
    )


def test_the_last_ranks_loss_is_stored_per_interval_and_served(
    cluster: list[Node], viewer_client: APIClient
) -> None:
    task = TaskFactory(state="running")
    devices = list(Device.objects.order_by("node__name", "index")[:2])
    for rank, device in enumerate(devices):
        Allocation.objects.create(task=task, device=device, rank=rank)
    node_id = devices[0].node_id

    record_iteration_stats(node_id, report(task, 0, 9, 6.5))  # rank 0 of 2: not the loss stage
    record_iteration_stats(node_id, report(task, 1, 9, 6.25))
    record_iteration_stats(node_id, report(task, 1, 19, 5.0, validation_loss=5.5))

    losses = MetricSample.objects.filter(task=task, kind=MetricKind.TRAINING_LOSS).order_by("iteration")
    assert [(s.iteration, s.value) for s in losses] == [(9, 6.25), (19, 5.0)]
    assert MetricSample.objects.filter(task=task, kind=MetricKind.TOKENS_PER_S).count() == 1
    validation = MetricSample.objects.get(task=task, kind=MetricKind.VALIDATION_LOSS)
    assert (validation.iteration, validation.value) == (19, 5.5)
    assert MetricSample.objects.filter(task=task, kind=MetricKind.LEARNING_RATE).count() == 2
    assert MetricSample.objects.filter(task=task, kind=MetricKind.GRAD_NORM).count() == 2
    body = viewer_client.get(f"/api/v1/metrics/tasks/{task.pk}/", {"kind": "training_loss"}).json()
    assert body["kind"] == "training_loss"
    assert sum(p["count"] for p in body["points"]) == 2


def test_an_interval_without_a_loss_stores_none(cluster: list[Node]) -> None:
    task = TaskFactory(state="running")
    Allocation.objects.create(task=task, device=Device.objects.first(), rank=0)

    record_iteration_stats(Device.objects.first().node_id, report(task, 0, 9, None))

    assert not MetricSample.objects.filter(kind=MetricKind.TRAINING_LOSS).exists()
    assert not MetricSample.objects.filter(kind=MetricKind.LEARNING_RATE).exists()
    assert MetricSample.objects.filter(task=task, kind=MetricKind.ITERATION_TIME).exists()
