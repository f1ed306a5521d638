"""Iteration statistics from the ranks become the tasks' progress and metric samples (no per-iteration
database write: the agent sends one summary per interval and rank). A batch of summaries, whatever its
size, is one transaction of a fixed number of statements (the agent link of an ASGI process stores its
links' summaries together: :mod:`controlplane.live.stats_batch`).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models import Count, Q

from controlplane.apps.metrics.choices import MetricKind
from controlplane.apps.metrics.services import Sample, do_record_samples
from controlplane.apps.planning.progress import record_ranks_progress
from controlplane.apps.training.models import TrainingTask
from controlplane.apps.training.selectors import task_pk
from controlplane.core.protocol import IterationStats, WorkerReport

LOCK_WAIT_MS = 200
"""How long a batch waits for a row another transaction holds (a task row that the planner or a
calibration updates, a transition step the orchestrator moves) before it gives up and is tried again:
the batch, not the orchestration loop, is the one that yields (a deadlock is detected only after a
second, and PostgreSQL could have chosen the other transaction to abort)."""


def _give_way(ms: int) -> None:
    """Row locks this transaction waits for longer than ``ms`` fail it (``lock_timeout``)."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL lock_timeout = %s", [f"{ms}ms"])


@dataclass(frozen=True)
class Ingested:
    """What a batch of iteration stats changed."""

    reports: int
    progressed: int
    """Reports of their tasks' current epochs (they advanced the task and its resume step)."""
    samples: int


def record_iteration_stats(node_id: int, report: WorkerReport) -> str:
    """One rank's iteration stats (:func:`record_iteration_stats_batch` of one)."""
    done = record_iteration_stats_batch([report])
    if not done.progressed and not done.samples:
        return "iteration stats: stale epoch, unknown task or empty"
    return f"iteration stats: {done.samples} samples"


@transaction.atomic
def record_iteration_stats_batch(reports: list[WorkerReport]) -> Ingested:
    """Every rank's progress at the current epoch advances the task and its transition's resume step.
    A row lock held by another transaction for longer than :data:`LOCK_WAIT_MS` fails the batch
    (``OperationalError``; the caller tries it again).
    Rank 0's interval summary becomes the task's rate samples, the last rank's loss, validation loss,
    learning rate and gradient norm (each when the worker measured it) its training samples. Iteration
    time is the same on every rank (the step ends with a collective); tokens and model FLOPs are the
    rank's share of the global batch (the worker splits it evenly), so the task's rates are the share
    times the number of active ranks (one when none is active)."""
    _give_way(LOCK_WAIT_MS)
    progressed = record_ranks_progress(reports)
    measured = [
        r
        for r in reports
        if isinstance(r.event, IterationStats)
        and r.event.iterations > 0
        and r.event.median_s > 0
        and task_pk(r.task_id) is not None
    ]
    pks = sorted({task_pk(r.task_id) or -1 for r in measured})
    active = Count("allocations", filter=Q(allocations__active=True))
    ranks_of = dict(TrainingTask.objects.filter(pk__in=pks).annotate(n=active).values_list("pk", "n"))
    samples: list[Sample] = []
    for report in measured:
        pk = task_pk(report.task_id) or -1
        if pk in ranks_of:
            samples.extend(_samples(report, pk, ranks_of[pk] or 1))
    return Ingested(len(reports), len(progressed), do_record_samples(samples) if samples else 0)


def _samples(report: WorkerReport, pk: int, ranks: int) -> list[Sample]:
    """The samples one rank's summary gives its task, which has ``ranks`` active ranks."""
    stats = report.event
    assert isinstance(stats, IterationStats)
    at, last = report.detected_at, stats.last_iteration
    samples: list[Sample] = []
    if report.rank == ranks - 1:
        # the last rank is on the last pipeline stage (tensor, then data, then pipeline rank order),
        # which is where the loss is computed; its loss is that of its data-parallel share
        measured = [
            (MetricKind.TRAINING_LOSS, stats.loss),
            (MetricKind.LEARNING_RATE, stats.learning_rate),
            (MetricKind.GRAD_NORM, stats.grad_norm),
        ]
        samples += [Sample(kind, value, at, pk, last) for kind, value in measured if value is not None]
        if stats.validation_loss is not None:
            # at the iteration the evaluation followed (the interval may have gone on after it)
            evaluated = last if stats.validation_iteration is None else stats.validation_iteration
            samples.append(Sample(MetricKind.VALIDATION_LOSS, stats.validation_loss, at, pk, evaluated))
    if report.rank != 0:
        return samples
    per_iteration_s = stats.median_s
    tokens_per_s = stats.tokens / stats.iterations / per_iteration_s * ranks
    flops = stats.model_flops / stats.iterations / per_iteration_s * ranks
    samples += [
        Sample(MetricKind.ITERATION_TIME, per_iteration_s, at, pk, last),
        Sample(MetricKind.TOKENS_PER_S, tokens_per_s, at, pk, last),
        Sample(MetricKind.ACHIEVED_FLOPS, flops, at, pk, last),
    ]
    return samples
