"""Iteration statistics from the ranks become the task's progress and metric samples (no per-iteration
database write: the agent sends one summary per interval and rank).
"""

from __future__ import annotations

from django.db import transaction

from controlplane.apps.metrics.choices import MetricKind
from controlplane.apps.metrics.services import Sample, do_record_samples
from controlplane.apps.planning.progress import record_rank_progress
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.apps.training.selectors import task_pk
from controlplane.core.protocol import IterationStats, WorkerReport


@transaction.atomic
def record_iteration_stats(node_id: int, report: WorkerReport) -> str:
    """Every rank's progress at the current epoch advances the task and its transition's resume step.
    Rank 0's interval summary becomes the task's rate samples, the last rank's loss, validation loss,
    learning rate and gradient norm (each when the worker measured it) its training samples. Iteration
    time is the same on every rank (the step ends with a collective); tokens and model FLOPs are the
    rank's share of the global batch (the worker splits it evenly), so the task's rates are the share
    times the number of active ranks."""
    stats = report.event
    assert isinstance(stats, IterationStats)
    record_rank_progress(report, stats)
    pk = task_pk(report.task_id)
    if pk is None or stats.iterations == 0 or stats.median_s <= 0:
        return "iteration stats: not recorded (empty)"
    if not TrainingTask.objects.filter(pk=pk).exists():
        return f"iteration stats: unknown task {report.task_id!r}"
    ranks = Allocation.objects.filter(task_id=pk, active=True).count() or 1
    if report.rank == ranks - 1:
        # the last rank is on the last pipeline stage (tensor, then data, then pipeline rank order),
        # which is where the loss is computed; its loss is that of its data-parallel share
        measured = [
            (MetricKind.TRAINING_LOSS, stats.loss),
            (MetricKind.LEARNING_RATE, stats.learning_rate),
            (MetricKind.GRAD_NORM, stats.grad_norm),
        ]
        at, last = report.detected_at, stats.last_iteration
        training = [Sample(kind, value, at, pk, last) for kind, value in measured if value is not None]
        if stats.validation_loss is not None:
            # at the iteration the evaluation followed (the interval may have gone on after it)
            evaluated = last if stats.validation_iteration is None else stats.validation_iteration
            training.append(Sample(MetricKind.VALIDATION_LOSS, stats.validation_loss, at, pk, evaluated))
        if training:
            do_record_samples(training)
    if report.rank != 0:
        return "iteration stats: progress only (not rank 0)"
    per_iteration_s = stats.median_s
    at = report.detected_at
    samples = [Sample(MetricKind.ITERATION_TIME, per_iteration_s, at, pk, stats.last_iteration)]
    samples.append(
        Sample(
            MetricKind.TOKENS_PER_S,
            stats.tokens / stats.iterations / per_iteration_s * ranks,
            at,
            pk,
            stats.last_iteration,
        )
    )
    samples.append(
        Sample(
            MetricKind.ACHIEVED_FLOPS,
            stats.model_flops / stats.iterations / per_iteration_s * ranks,
            at,
            pk,
            stats.last_iteration,
        )
    )
    return f"iteration stats: {do_record_samples(samples)} samples"
