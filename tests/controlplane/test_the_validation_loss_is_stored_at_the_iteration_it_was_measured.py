"""The last rank's validation loss becomes the task's ``validation_loss`` series at the iteration the
evaluation followed (the report's interval may have gone on after it), and the API serves it."""

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
    task: TrainingTask, rank: int, first: int, last: int, validation: tuple[int, float]
) -> WorkerReport:
    now = timezone.now()
    stats = IterationStats(
        first_iteration=first,
        last_iteration=last,
        iterations=last - first + 1,
        median_s=0.1,
        max_s=0.2,
        compute_median_s=0.08,
        micro_batches=40,
        tokens=4096,
        model_flops=1e12,
        loss=6.0,
        validation_iteration=validation[0],
        validation_loss=validation[1],
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


def test_validation_losses_are_stored_at_their_iterations_and_served(
    cluster: list[Node], viewer_client: APIClient
) -> None:
    task = TaskFactory(state="running")
    devices = list(Device.objects.order_by("node__name", "index")[:2])
    for rank, device in enumerate(devices):
        Allocation.objects.create(task=task, device=device, rank=rank)
    node_id = devices[0].node_id

    record_iteration_stats(node_id, report(task, 0, 0, 2, (2, 6.5)))  # rank 0 of 2: not stored
    record_iteration_stats(node_id, report(task, 1, 0, 2, (2, 6.25)))
    record_iteration_stats(node_id, report(task, 1, 3, 7, (5, 6.0)))  # flushed after two more iterations

    validation = MetricSample.objects.filter(task=task, kind=MetricKind.VALIDATION_LOSS).order_by("iteration")
    assert [(s.iteration, s.value) for s in validation] == [(2, 6.25), (5, 6.0)]
    training = MetricSample.objects.filter(task=task, kind=MetricKind.TRAINING_LOSS).order_by("iteration")
    assert [s.iteration for s in training] == [2, 7]
    body = viewer_client.get(f"/api/v1/metrics/tasks/{task.pk}/", {"kind": "validation_loss"}).json()
    assert body["kind"] == "validation_loss"
    assert sum(p["count"] for p in body["points"]) == 2
