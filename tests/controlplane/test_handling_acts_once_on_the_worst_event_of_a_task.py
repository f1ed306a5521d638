"""Failure handling on rows: a peer's "connection reset" (sev3) and a crash (sev2) at the same epoch
give one sev2 restart on the same devices: the crashed rank restarts, the peer that only saw the reset
stays in place as a survivor (elastic workers outlive a collective error); evidence of an older epoch does
nothing."""

from __future__ import annotations

import uuid

from django.db import transaction
from django.utils import timezone

from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.planning.handling import handle_failure
from controlplane.apps.planning.models import Transition
from controlplane.apps.planning.replan import replan
from controlplane.apps.training.models import Allocation, TrainingTask
from tests.controlplane.factories import NodeFactory, TaskFactory


def event(
    task: TrainingTask, severity: str, action: str, rank: int, kind: str, epoch: int, waiting: bool = False
) -> FailureEvent:
    now = timezone.now()
    return FailureEvent.objects.create(
        report_id=uuid.uuid4(),
        detector="process_supervision" if kind == "exited" else "exception_propagation",
        kind="killed" if kind == "exited" else "connection_error",
        severity=severity,
        action=action,
        occurred_at=now,
        detected_at=now,
        task=task,
        task_epoch=epoch,
        evidence={"report": {"rank": rank, "event": {"kind": kind, "waiting": waiting}}},
    )


def running_task() -> TrainingTask:
    NodeFactory(devices=8)
    task = TaskFactory(min_workers=8, max_workers=8)
    with transaction.atomic():
        replan("task_submitted")
    Transition.objects.filter(task=task).update(state="completed")
    TrainingTask.objects.filter(pk=task.pk).update(state="running")
    task.refresh_from_db()
    return task


def test_the_crash_wins_over_the_peers_connection_reset(db: None) -> None:
    task = running_task()
    devices = sorted(Allocation.objects.filter(task=task, active=True).values_list("device_id", "rank"))
    reset = event(task, "sev3", "retry_in_place", rank=0, kind="exception", epoch=task.epoch, waiting=True)
    crash = event(task, "sev2", "restart_processes", rank=3, kind="exited", epoch=task.epoch)
    outcome = handle_failure(reset.pk).note
    assert outcome.startswith("restart on the same devices")
    reset.refresh_from_db()
    crash.refresh_from_db()
    assert reset.handled_by_id == crash.pk
    assert crash.handled_by_id == crash.pk
    t = Transition.objects.get(task=task, epoch=task.epoch + 1)
    assert (t.kind, t.failure_event_id) == ("restart", crash.pk)
    survivors = {tuple(x) for x in t.steps.get(name="reconfigure").detail["survivors"]}
    # only the crashed rank restarts; rank 0 saw the reset (a consequence), says it waits, and survives
    # in place. (A worker that left after the reset would send its own exit report, a failure of its own.)
    assert survivors == {(r, r) for r in (0, 1, 2, 4, 5, 6, 7)}
    after = sorted(Allocation.objects.filter(task=task, active=True).values_list("device_id", "rank"))
    assert after == devices
    assert handle_failure(crash.pk).note == "already handled"


def test_evidence_from_an_older_epoch_triggers_nothing(db: None) -> None:
    task = running_task()
    old = event(task, "sev2", "restart_processes", rank=1, kind="exited", epoch=task.epoch - 1)
    assert "epoch" in handle_failure(old.pk).note
    old.refresh_from_db()
    assert old.handled_at is not None
    assert not Transition.objects.filter(task=task, epoch=task.epoch + 1).exists()


def test_a_restart_keeps_in_place_every_rank_that_waits_whatever_its_severity(db: None) -> None:
    """Repeated transient errors on a node escalate a peer's connection reset to sev2 (history); the
    worker still says it is alive and waiting, so the restart keeps it in place. The rank whose own
    exception ended its process (not waiting) restarts."""
    task = running_task()
    own = event(task, "sev2", "restart_processes", rank=5, kind="exception", epoch=task.epoch)
    seen = event(task, "sev2", "restart_processes", rank=2, kind="exception", epoch=task.epoch, waiting=True)
    assert handle_failure(seen.pk).note.startswith("restart on the same devices")
    t = Transition.objects.get(task=task, epoch=task.epoch + 1)
    survivors = {tuple(x) for x in t.steps.get(name="reconfigure").detail["survivors"]}
    assert survivors == {(r, r) for r in (0, 1, 2, 3, 4, 6, 7)}
    own.refresh_from_db()
    assert own.handled_at is not None


def test_a_restart_where_every_rank_waits_restarts_none_of_them(db: None) -> None:
    task = running_task()
    for rank in (0, 1):
        last = event(
            task, "sev2", "restart_processes", rank=rank, kind="exception", epoch=task.epoch, waiting=True
        )
    assert handle_failure(last.pk).note.startswith("restart on the same devices")
    t = Transition.objects.get(task=task, epoch=task.epoch + 1)
    survivors = {tuple(x) for x in t.steps.get(name="reconfigure").detail["survivors"]}
    assert survivors == {(r, r) for r in range(8)}
