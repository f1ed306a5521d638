"""Checkpoint reports from the ranks become the task's :class:`Checkpoint` rows (one per iteration: the
same checkpoint reported again, by another rank or a resent frame, is recorded once)."""

from __future__ import annotations

from django.db import transaction

from controlplane.apps.training.models import Checkpoint, TrainingTask
from controlplane.apps.training.selectors import task_pk
from controlplane.core.protocol import CheckpointSaved, WorkerReport


@transaction.atomic
def record_checkpoint_saved(node_id: int, report: WorkerReport) -> str:
    """Record the checkpoint of ``report`` (a ``checkpoint_saved`` event) unless its iteration is known."""
    saved = report.event
    assert isinstance(saved, CheckpointSaved)
    pk = task_pk(report.task_id)
    if pk is None or not TrainingTask.objects.filter(pk=pk).exists():
        return f"checkpoint: unknown task {report.task_id!r}"
    _, created = Checkpoint.objects.get_or_create(
        task_id=pk,
        iteration=saved.iteration,
        defaults={
            "path": saved.path,
            "size_bytes": saved.size_bytes,
            "validation_loss": saved.validation_loss,
            "epoch": report.epoch,
            "rank": report.rank,
            "saved_at": report.detected_at,
        },
    )
    return f"checkpoint: iteration {saved.iteration} {'recorded' if created else 'already known'}"
