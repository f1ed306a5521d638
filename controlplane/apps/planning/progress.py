"""A task's progress as its ranks report it: iterations done (which also complete a transition's resume
step), ranks resumed after a transition, ranks that finished their iterations (the task completes when all
have). Reports of an older epoch change nothing (fencing).
"""

from __future__ import annotations

from django.db import transaction

from controlplane.apps.fleet.choices import NodeState
from controlplane.apps.fleet.models import Node
from controlplane.apps.planning.transitions import (
    RankProgress,
    do_record_rank_resumed,
    do_record_ranks_resumed,
)
from controlplane.apps.training.models import TrainingTask
from controlplane.apps.training.selectors import task_pk
from controlplane.apps.training.services import (
    do_mark_rank_finished,
    do_record_progress,
    do_record_tasks_progress,
)
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


def record_ranks_progress(reports: list[WorkerReport]) -> list[WorkerReport]:
    """Iteration stats of several ranks: those of their tasks' current epochs (fencing; one query for
    all) advance their tasks' iteration counters and their transitions' resume steps (steps locked
    first, then the task rows, as the orchestrator does: no deadlock with it). Returns the reports that
    counted."""
    stats = [r for r in reports if isinstance(r.event, IterationStats) and r.event.iterations > 0]
    pks = {pk for r in stats if (pk := task_pk(r.task_id)) is not None}
    if not pks:
        return []
    epochs = dict(TrainingTask.objects.filter(pk__in=sorted(pks)).values_list("pk", "epoch"))
    current = [r for r in stats if epochs.get(task_pk(r.task_id) or -1) == r.epoch]
    progress = [
        RankProgress(
            task_pk(r.task_id) or -1,
            r.epoch,
            r.rank,
            r.event.first_iteration,
            r.event.last_iteration,
        )
        for r in current
        if isinstance(r.event, IterationStats)
    ]
    do_record_ranks_resumed(progress)
    reached: dict[int, int] = {}
    for p in progress:
        reached[p.task_id] = max(reached.get(p.task_id, p.last_iteration), p.last_iteration)
    do_record_tasks_progress(reached)
    return current
