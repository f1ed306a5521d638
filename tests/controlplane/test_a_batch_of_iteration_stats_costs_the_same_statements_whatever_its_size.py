"""The agent link of an ASGI process stores its links' iteration stats together: a batch advances every
task's iteration counter and its transition's resume step and stores the samples, in a number of SQL
statements that does not grow with the batch (stored one by one, each report cost eight to eleven)."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from controlplane.apps.fleet.models import Node
from controlplane.apps.metrics.choices import MetricKind
from controlplane.apps.metrics.ingest import record_iteration_stats_batch
from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.planning.choices import StepState, TransitionState
from controlplane.apps.planning.models import Transition, TransitionStep
from controlplane.apps.planning.replan import replan
from controlplane.apps.training.models import TrainingTask
from controlplane.apps.training.services import TaskSubmission, do_submit_task
from controlplane.core.protocol import IterationStats, WorkerReport
from controlplane.core.transitions.steps import StepDetail


def submit(name: str) -> TrainingTask:
    return do_submit_task(
        None,
        TaskSubmission(
            name=name,
            num_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            seq_length=32,
            vocab_size=128,
            global_batch_size=8,
            micro_batch_size=2,
            min_workers=4,
            max_workers=4,
        ),
    )


def stats(task: TrainingTask, rank: int, last: int) -> WorkerReport:
    now = timezone.now()
    return WorkerReport(
        report_id=f"r-{task.pk}-{rank}-{last}",
        task_id=str(task.pk),
        epoch=task.epoch,
        rank=rank,
        device=rank,
        detector=None,
        occurred_at=now - timedelta(seconds=1),
        detected_at=now,
        event=IterationStats(
            first_iteration=last - 4,
            last_iteration=last,
            iterations=5,
            median_s=0.5,
            max_s=0.6,
            compute_median_s=0.4,
            micro_batches=4,
            tokens=1024,
            model_flops=1e9,
            loss=4.0,
        ),
    )


def resuming(task: TrainingTask) -> TransitionStep:
    """``task``'s transition, its commands acknowledged: its resume step waits for the ranks."""
    t = Transition.objects.get(task=task, epoch=task.epoch)
    Transition.objects.filter(pk=t.pk).update(state=TransitionState.RUNNING)
    TransitionStep.objects.filter(transition=t).exclude(name="resume").update(state=StepState.DONE)
    TransitionStep.objects.filter(transition=t, name="resume").update(state=StepState.RUNNING)
    return TransitionStep.objects.get(transition=t, name="resume")


def statements(reports: list[WorkerReport]) -> int:
    with CaptureQueriesContext(connection) as ctx, transaction.atomic():
        record_iteration_stats_batch(reports)
    return len(ctx.captured_queries)


def test_a_batch_advances_every_task_and_resume_step_in_statements_that_do_not_grow(
    cluster: list[Node],
) -> None:
    tasks = [submit("a"), submit("b")]
    with transaction.atomic():
        replan("task_submitted")
    tasks = [TrainingTask.objects.get(pk=t.pk) for t in tasks]
    steps = [resuming(t) for t in tasks]
    assert all(sorted(StepDetail.read(s.detail).ranks) == [0, 1, 2, 3] for s in steps)

    one = statements([stats(tasks[0], 0, 10)])
    many = statements([stats(t, rank, last) for t in tasks for rank in range(4) for last in (20, 30)])

    assert many == one == 13, (one, many)
    for task, step in zip(tasks, steps, strict=True):
        detail = StepDetail.read(TransitionStep.objects.get(pk=step.pk).detail)
        assert not detail.missing_ranks()
        first = 6 if task == tasks[0] else 16  # task a's rank 0 reported iterations 6..10 first
        assert (detail.reported[0].first_iteration, detail.reported[0].last_iteration) == (first, 30)
        assert detail.reported[3].first_iteration == 16
        assert TrainingTask.objects.get(pk=task.pk).iteration == 30
        # rank 0: three rate samples per report; rank 3 (the last of four): its loss
        assert MetricSample.objects.filter(task=task, kind=MetricKind.TOKENS_PER_S).count() == 2 + (
            task == tasks[0]
        )
        losses = MetricSample.objects.filter(task=task, kind=MetricKind.TRAINING_LOSS)
        assert sorted(losses.values_list("iteration", flat=True)) == [20, 30]
        tokens = MetricSample.objects.filter(task=task, kind=MetricKind.TOKENS_PER_S).first()
        assert tokens is not None
        assert tokens.value == 1024 / 5 / 0.5 * 4


def test_a_report_of_an_older_epoch_advances_nothing_in_the_batch(cluster: list[Node]) -> None:
    task = submit("a")
    with transaction.atomic():
        replan("task_submitted")
    task = TrainingTask.objects.get(pk=task.pk)
    step = resuming(task)
    old = stats(task, 0, 50).model_copy(update={"epoch": task.epoch - 1})

    done = record_iteration_stats_batch([old, stats(task, 1, 10)])

    assert done.progressed == 1
    assert TrainingTask.objects.get(pk=task.pk).iteration == 10
    assert set(StepDetail.read(TransitionStep.objects.get(pk=step.pk).detail).reported) == {1}
