"""Iteration statistics from the ranks become the task's progress and metric samples (no per-iteration
database write: the agent sends one summary per interval and rank).
"""

from __future__ import annotations

from django.db import transaction

from controlplane.apps.fleet.authority import task_pk
from controlplane.apps.metrics.choices import MetricKind
from controlplane.apps.metrics.services import Sample, do_record_samples
from controlplane.apps.planning.progress import record_rank_progress
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.core.protocol import IterationStats, WorkerReport


@transaction.atomic
def record_iteration_stats(node_id: int, report: WorkerReport) -> str:
    """Every rank's progress at the current epoch advances the task and its transition's resume step.
    Rank 0's interval summary becomes the task's samples. Iteration time is the same on every rank
    (the step ends with a collective); tokens and model FLOPs are the rank's share of the global batch
    (the worker splits it evenly), so the task's rates are the share times the number of active ranks."""
    stats = report.event
    assert isinstance(stats, IterationStats)
    record_rank_progress(report, stats)
    pk = task_pk(report.task_id)
    if report.rank != 0 or pk is None or stats.iterations == 0 or stats.median_s <= 0:
        return "iteration stats: not recorded (not rank 0 or empty)"
    if not TrainingTask.objects.filter(pk=pk).exists():
        return f"iteration stats: unknown task {report.task_id!r}"
    ranks = Allocation.objects.filter(task_id=pk, active=True).count() or 1
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
