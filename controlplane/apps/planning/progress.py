"""A task's progress as its ranks report it: iterations done (which also complete a transition's resume
step), ranks resumed after a transition, ranks that finished their iterations (the task completes when all
have). Reports of an older epoch change nothing (fencing).
"""

from __future__ import annotations

from django.db import transaction

from controlplane.apps.fleet.choices import NodeState
from controlplane.apps.fleet.models import Node
from controlplane.apps.planning.transitions import do_record_rank_resumed
from controlplane.apps.training.models import TrainingTask
from controlplane.apps.training.selectors import task_pk
from controlplane.apps.training.services import do_mark_rank_finished, do_record_progress
from controlplane.core.protocol import IterationStats, TransitionReport, WorkerExited, WorkerReport


def current_task(report: WorkerReport) -> TrainingTask | None:
    """The report's task when the report belongs to its current epoch (fencing), else None."""
    pk = task_pk(report.task_id)
    if pk is None:
        return None
    return TrainingTask.objects.filter(pk=pk, epoch=report.epoch).first()


@transaction.atomic
def record_transition_report(node_id: int, report: WorkerReport) -> str:
    """A rank of the current epoch resumed after a transition: its transition's resume step and the task's
    iteration advance."""
    event = report.event
    assert isinstance(event, TransitionReport)
    task = current_task(report)
    if task is None:
        return "transition report: stale epoch or unknown task"
    do_record_rank_resumed(
        task.pk, report.epoch, report.rank, event.iteration, event.iteration, event.model_dump(mode="json")
    )
    do_record_progress(task, event.iteration)
    return f"transition report of rank {report.rank} (source {event.source})"


@transaction.atomic
def record_expected_exit(node_id: int, report: WorkerReport) -> str:
    """A rank exited on purpose. Exit code 0 at the current epoch on a healthy node means it finished its
    iterations; when every rank has, the task is completed (and the workload manager re-plans)."""
    event = report.event
    assert isinstance(event, WorkerExited)
    task = current_task(report)
    finished = event.exit_code == 0 and event.signal is None
    if task is None or not finished:
        return "exited: expected"
    if not Node.objects.filter(pk=node_id, state=NodeState.HEALTHY).exists():
        return "exited: expected (node not healthy: not counted as finished)"
    completed = do_mark_rank_finished(task, report.epoch, report.rank)
    return f"exited: rank {report.rank} finished{'; task completed' if completed else ''}"


def record_rank_progress(report: WorkerReport, stats: IterationStats) -> None:
    """Every rank's progress at the current epoch advances the task and its transition's resume step."""
    task = current_task(report)
    if task is not None and stats.iterations > 0:
        # lock order as in the orchestrator (transition step, then task row): no deadlock with it
        first, last = stats.first_iteration, stats.last_iteration
        do_record_rank_resumed(task.pk, report.epoch, report.rank, first, last)
        do_record_progress(task, stats.last_iteration)
