"""A new epoch that resumes behind the task's iteration counter (relaunched from a checkpoint older than
what an earlier epoch reported, or taking a peer's state that was behind it) sets the counter back to
where its ranks are once its transition completes: the counter says where training is, so the task is
seen advancing again at once and the next transition plans from the right iteration. An epoch at or
past the counter leaves it alone."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from controlplane.apps.fleet.models import AgentCommand
from controlplane.apps.planning.models import Transition
from controlplane.apps.planning.replan import replan
from controlplane.apps.planning.transitions import advance_transition, do_record_rank_resumed
from controlplane.apps.training.models import TrainingTask
from tests.controlplane.factories import NodeFactory, TaskFactory


def _launched_with_counter_at(counter: int) -> tuple[TrainingTask, Transition]:
    NodeFactory(devices=2)
    task = TaskFactory(min_workers=2, max_workers=2)
    with transaction.atomic():
        (t,) = replan("task_submitted").transitions
    TrainingTask.objects.filter(pk=task.pk).update(iteration=counter)  # an earlier epoch's highest report
    assert advance_transition(t.pk) == "running"
    AgentCommand.objects.filter(transition=t).update(state="acked", acked_at=timezone.now())
    return task, t


def test_a_counter_past_the_resumed_ranks_is_set_back_to_them(db: None) -> None:
    task, t = _launched_with_counter_at(1850)
    for rank in range(2):
        do_record_rank_resumed(task.pk, t.epoch, rank, 850, 851 + rank)
    assert advance_transition(t.pk) == "completed"
    task.refresh_from_db()
    assert (task.state, task.iteration) == ("running", 852)


def test_a_counter_the_ranks_resumed_at_or_past_is_left_alone(db: None) -> None:
    task, t = _launched_with_counter_at(1850)
    for rank in range(2):
        do_record_rank_resumed(task.pk, t.epoch, rank, 1851, 1853)
    assert advance_transition(t.pk) == "completed"
    task.refresh_from_db()
    assert task.iteration == 1850  # progress reports advance it, as before
