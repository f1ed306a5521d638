"""Transitions as persisted state machines (docs/ARCHITECTURE.md §2, §7.6): acks and reports advance them, a
beat task
times them out. Celery never waits for an agent: each arrival enqueues ``planning.advance_transition``,
which reads the rows and moves what can move.

Steps (created by :mod:`controlplane.apps.planning.launch`):

- ``stop`` / ``start`` / ``reconfigure`` / ``retry``: done when every command of the step is acked;
  a command acked ``failed`` / ``rejected`` / ``stale_epoch`` fails the transition;
- ``resume``: done when every rank of the new epoch has reported progress at the new epoch (a
  ``TransitionReport`` or an ``IterationStats``).

Every step has a deadline; :func:`check_transitions` (beat, every second) fails overdue transitions,
which escalates (:func:`controlplane.apps.planning.handling.escalate_failed_transition`). A failed or
superseded transition's unacknowledged commands are failed so the outbox never delivers them.

On success the transition stores migration sources per rank, lost micro-batches and seconds, time per
phase (from TransitionReports when present, else from step timestamps) and the detection latency;
its failure events are resolved and the task is running again.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from controlplane.apps.common.triggers import request_failure_handling, request_transition_advance
from controlplane.apps.fleet.choices import CommandState
from controlplane.apps.fleet.models import AgentCommand, Node
from controlplane.apps.fleet.services import do_record_snapshots, do_wake_stale_commands
from controlplane.apps.incidents.choices import Action
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.incidents.services import do_resolve_failure_event
from controlplane.apps.planning.choices import StepState, TransitionKind, TransitionState
from controlplane.apps.planning.locking import orchestration_lock
from controlplane.apps.planning.models import Transition, TransitionStep
from controlplane.apps.planning.selectors import get_recent_iteration_s
from controlplane.apps.planning.services import (
    do_fail_running_steps,
    do_record_step_details,
    do_set_step_state,
    do_set_transition_state,
    do_skip_open_steps,
)
from controlplane.apps.planning.signals import transition_failed
from controlplane.apps.training.choices import TaskState
from controlplane.apps.training.services import do_rewind_progress, do_set_task_state
from controlplane.core.transitions.steps import RankResumed, StepDetail

log = logging.getLogger(__name__)

COMMAND_STEPS = frozenset({"stop", "start", "reconfigure", "retry"})
UNHANDLED_GRACE_S = 10.0
"""An unhandled failure event older than this (its handling message was lost, or the worker died) is
re-enqueued by the watchdog."""


# --------------------------------------------------------------------------------------------------
# Reports from the agent link
# --------------------------------------------------------------------------------------------------


def do_record_rank_resumed(
    task_id: int,
    epoch: int,
    rank: int,
    first_iteration: int,
    last_iteration: int,
    report: dict[str, Any] | None = None,
) -> bool:
    """A rank of ``epoch`` made progress (iteration stats) or sent its TransitionReport. Returns True
    when that completes the resume step (an advance is then enqueued after commit)."""
    resumed = RankProgress(task_id, epoch, rank, first_iteration, last_iteration, report)
    return bool(do_record_ranks_resumed([resumed]))


@dataclass(frozen=True)
class RankProgress:
    """One rank's progress at ``epoch``: iterations ``first``..``last`` (and its TransitionReport)."""

    task_id: int
    epoch: int
    rank: int
    first_iteration: int
    last_iteration: int
    report: dict[str, Any] | None = None


def do_record_ranks_resumed(progress: list[RankProgress]) -> list[int]:
    """Ranks made progress (iteration stats, TransitionReports): the resume steps of their tasks' running
    transitions at those epochs record them, each step row locked and written once, in primary-key order
    (no lock-order cycle between two writers). Returns the transitions whose resume step that completed
    (an advance of each is enqueued after commit)."""
    tasks = {p.task_id for p in progress}
    if not tasks:
        return []
    steps = (
        # the step rows only: no lock-order cycle with the orchestrator (step, then task row)
        TransitionStep.objects.select_for_update(of=("self",), no_key=True)
        .select_related("transition")
        .filter(
            transition__task_id__in=sorted(tasks),
            transition__state=TransitionState.RUNNING,
            name="resume",
            state=StepState.RUNNING,
        )
        .order_by("pk")
    )
    completed: list[int] = []
    written: list[tuple[TransitionStep, StepDetail]] = []
    for step in steps:
        mine = [
            p for p in progress if p.task_id == step.transition.task_id and p.epoch == step.transition.epoch
        ]
        if not mine:
            continue
        detail = StepDetail.read(step.detail)
        reported = dict(detail.reported)
        for p in mine:
            entry = reported.get(p.rank) or RankResumed(
                first_iteration=p.first_iteration, at=timezone.now().isoformat()
            )
            reported[p.rank] = entry.model_copy(
                update={
                    "first_iteration": min(entry.first_iteration, p.first_iteration),
                    "last_iteration": max(
                        entry.last_iteration if entry.last_iteration is not None else p.last_iteration,
                        p.last_iteration,
                    ),
                    **({"report": p.report} if p.report is not None else {}),
                }
            )
        detail.reported = reported
        written.append((step, detail))
        if not detail.missing_ranks():
            request_transition_advance(step.transition_id)
            completed.append(step.transition_id)
    do_record_step_details(written)
    return completed


def on_command_settled(command: AgentCommand) -> None:
    """An ack of a transition's command arrived: advance the transition after commit."""
    if command.transition_id is not None:
        request_transition_advance(command.transition_id)


# --------------------------------------------------------------------------------------------------
# Advancing
# --------------------------------------------------------------------------------------------------


def advance_transition(transition_id: int) -> str:
    """Move the transition's steps as far as the rows allow. Idempotent."""
    with transaction.atomic():
        orchestration_lock()
        # lock the transition row only (not its task): the agent link locks step, then task
        t = (
            Transition.objects.select_for_update(of=("self",), no_key=True)
            .select_related("task")
            .filter(pk=transition_id)
            .first()
        )
        if t is None or TRANSITION_TERMINAL(t.state):
            return "terminal"
        if t.task.epoch != t.epoch:
            do_skip_open_steps(t)
            do_set_transition_state(t, TransitionState.ROLLED_BACK, error="the task moved to a newer epoch")
            return "superseded"
        commands = {
            str(c.command_id): c for c in AgentCommand.objects.filter(transition=t).select_related("node")
        }
        steps = list(t.steps.order_by("order"))
        for step in steps:
            if step.state != StepState.RUNNING:
                continue
            if step.name in COMMAND_STEPS:
                rows = [commands[c] for c in StepDetail.read(step.detail).commands if c in commands]
                failed = [r for r in rows if r.state == CommandState.FAILED]
                if failed:
                    bad = failed[0]
                    reason = f"{bad.type} on {bad.node.name} failed: {bad.error}"
                    holder = snapshot_fetch_failure(bad.error)
                    if holder is not None:
                        # the copy (or its peer) is at fault, not the node that fetched it: that copy
                        # leaves the planner's view and the escalation's plan takes the next source
                        _withdraw_snapshots(t.task_id, holder)
                        fail_transition(t, reason, None)
                    else:
                        fail_transition(t, reason, bad.node)
                    return "failed"
                if all(r.state == CommandState.ACKED for r in rows):
                    do_set_step_state(step, StepState.DONE)
            elif step.name == "resume":
                if not StepDetail.read(step.detail).missing_ranks():
                    do_set_step_state(step, StepState.DONE)
        steps = list(t.steps.order_by("order"))
        if all(s.state in (StepState.DONE, StepState.SKIPPED) for s in steps):
            _complete(t, steps)
            return "completed"
        return "running"


_SNAPSHOT_FETCH_FAILED = re.compile(r"SnapshotFetchFailed: snapshot fetch from (\S+) failed")
"""How an agent's ack names a snapshot fetch that failed (``agents.agent``): authentication refused, an
unknown or unreachable peer, a broken transfer."""


def snapshot_fetch_failure(error: str) -> str | None:
    """The endpoint of the peer whose snapshot could not be fetched, when ``error`` says so."""
    m = _SNAPSHOT_FETCH_FAILED.search(error or "")
    return m.group(1) if m else None


def _withdraw_snapshots(task_id: int, endpoint: str) -> None:
    """The node serving ``endpoint`` no longer lists copies of ``task_id`` (until its agent's list
    changes): the next plan does not choose them again."""
    for node in Node.objects.filter(snapshot_endpoint=endpoint):
        kept = [s for s in (node.snapshots or []) if str(s.get("task_id")) != str(task_id)]
        if len(kept) != len(node.snapshots or []):
            do_record_snapshots(node.pk, kept)
            log.warning("snapshots of task %s on %s withdrawn after a failed fetch", task_id, node.name)


def TRANSITION_TERMINAL(state: str) -> bool:  # noqa: N802 - reads like the machine's predicate
    return state in (TransitionState.COMPLETED, TransitionState.FAILED, TransitionState.ROLLED_BACK)


def _complete(t: Transition, steps: list[TransitionStep]) -> None:
    task = t.task
    resume = next((s for s in steps if s.name == "resume"), None)
    reported = StepDetail.read(resume.detail).reported if resume else {}
    reports = [e.report for e in reported.values() if e.report]
    command_done = max(
        (s.finished_at for s in steps if s.name in COMMAND_STEPS and s.finished_at), default=t.started_at
    )
    phases: dict[str, float] = {}
    if reports:
        for r in reports:
            for phase, secs in (r.get("phases_s") or {}).items():
                phases[phase] = max(phases.get(phase, 0.0), float(secs))
    elif t.started_at is not None:
        if command_done is not None:
            phases["commands"] = (command_done - t.started_at).total_seconds()
        if resume is not None and resume.finished_at is not None and command_done is not None:
            phases["first_iteration"] = max((resume.finished_at - command_done).total_seconds(), 0.0)
    phases["total"] = ((timezone.now() - t.started_at).total_seconds()) if t.started_at else 0.0
    micro_per_iteration = max(task.global_batch_size // max(task.micro_batch_size, 1), 1)
    if reports:
        lost_mb = sum(int(r.get("recomputed_micro_batches", 0)) for r in reports)
        rolled = max((int(r.get("rolled_back_iterations", 0)) for r in reports), default=0)
        lost_iterations = rolled + lost_mb / micro_per_iteration
        lost_mb += rolled * micro_per_iteration
    else:
        firsts = [e.first_iteration for e in reported.values()]
        resumed_at = min(firsts) if firsts else 0
        expected_next = (t.resume_iteration + 1) if t.resume_iteration is not None else resumed_at
        lost_iterations = max(expected_next - resumed_at, 0)
        lost_mb = lost_iterations * micro_per_iteration
    iteration_s = get_recent_iteration_s(task) or 0.0
    sources = dict(t.migration_sources or {})
    for rank, e in reported.items():
        rep = e.report
        if rep:
            sources[str(rank)] = {
                k: rep.get(k) for k in ("source", "source_node", "source_rank", "bytes_moved", "in_place")
            } | {"reported": True}
    do_set_transition_state(
        t,
        TransitionState.COMPLETED,
        lost_microbatches=int(lost_mb),
        lost_work_s=float(lost_iterations) * iteration_s,
        phases_s=phases,
        migration_sources=sources,
    )
    events = list(FailureEvent.objects.filter(transition=t))
    if t.failure_event_id is not None:
        events += list(FailureEvent.objects.filter(pk=t.failure_event_id))
    # failures whose own transition a newer plan superseded (rolled back) or that failed (and was
    # escalated) are over too: the task left their epoch and runs again (else they would stay open for
    # good, e.g. a restart overtaken by a node loss, a relaunch whose rendezvous timed out)
    events += list(
        FailureEvent.objects.filter(
            transition__task=task,
            transition__state__in=[TransitionState.ROLLED_BACK, TransitionState.FAILED],
            transition__epoch__lt=t.epoch,
            resolved_at__isnull=True,
        )
    )
    for ev in events:
        do_resolve_failure_event(ev)
    # the new epoch's ranks are where training is: a counter left past them by an earlier epoch (the
    # epoch resumed from a checkpoint or a peer behind it) would read as a task making no progress until
    # they caught up, and the next transition would plan from that stale iteration
    reached = [
        e.last_iteration if e.last_iteration is not None else e.first_iteration for e in reported.values()
    ]
    if reached and do_rewind_progress(task, max(reached)):
        log.info("task %s resumed behind its iteration counter: set back to %s", task.pk, max(reached))
    task.refresh_from_db()
    if task.state == TaskState.RECONFIGURING:
        do_set_task_state(task, TaskState.RUNNING)
    log.info("transition %s of task %s completed: %s", t.pk, task.pk, phases)


def fail_transition(t: Transition, reason: str, node: Node | None = None, *, escalate: bool = True) -> None:
    """Mark ``t`` failed (its open steps and unacked commands too) and announce it for escalation
    (:data:`~controlplane.apps.planning.signals.transition_failed`)."""
    now = timezone.now()
    do_fail_running_steps(t)
    do_skip_open_steps(t)
    AgentCommand.objects.filter(transition=t, state__in=[CommandState.PENDING, CommandState.SENT]).update(
        state=CommandState.FAILED, error=f"transition failed: {reason}", acked_at=now
    )
    do_set_transition_state(t, TransitionState.FAILED, error=reason)
    log.warning("transition %s of task %s failed: %s", t.pk, t.task_id, reason)
    if not escalate or t.kind == TransitionKind.SUSPEND:
        return
    transition_failed.send(sender=Transition, transition=t, reason=reason, node=node)


# --------------------------------------------------------------------------------------------------
# The watchdog (beat, every second)
# --------------------------------------------------------------------------------------------------


def _culprit(t: Transition, step: TransitionStep) -> Node | None:
    """The node to blame for an overdue step: one whose command was never acked, or that hosts a rank
    that never reported."""
    detail = StepDetail.read(step.detail)
    if step.name in COMMAND_STEPS:
        for c in AgentCommand.objects.filter(transition=t, command_id__in=detail.commands).select_related(
            "node"
        ):
            if c.state != CommandState.ACKED:
                return c.node
        return None
    missing = detail.missing_ranks()
    from controlplane.apps.training.models import Allocation

    a = (
        Allocation.objects.filter(task_id=t.task_id, active=True, rank__in=missing)
        .select_related("device__node")
        .order_by("rank")
        .first()
    )
    return a.device.node if a is not None else None


def check_transitions() -> dict[str, int]:
    """Advance every running transition, fail the overdue ones, re-enqueue forgotten failure events."""
    now = timezone.now()
    advanced = failed = requeued = 0
    for t_id in list(Transition.objects.filter(state=TransitionState.RUNNING).values_list("pk", flat=True)):
        outcome = advance_transition(t_id)
        advanced += outcome != "running"
        with transaction.atomic():
            orchestration_lock()
            t = (
                Transition.objects.select_for_update(no_key=True)
                .filter(pk=t_id, state=TransitionState.RUNNING)
                .first()
            )
            if t is None:
                continue
            overdue = t.steps.filter(state=StepState.RUNNING, deadline_at__lt=now).order_by("order").first()
            if overdue is None:
                continue
            began = overdue.started_at or t.created_at
            waited = (now - began).total_seconds()
            allowed = (overdue.deadline_at - began).total_seconds() if overdue.deadline_at else waited
            reason = f"step {overdue.name} timed out after {waited:.1f}s (deadline {allowed:.0f}s)"
            fail_transition(t, reason, _culprit(t, overdue))
            failed += 1
    stale = FailureEvent.objects.filter(
        handled_at__isnull=True, detected_at__lt=now - timedelta(seconds=UNHANDLED_GRACE_S)
    ).exclude(action=Action.NONE)
    with transaction.atomic():
        for ev_id in stale.values_list("pk", flat=True)[:100]:
            request_failure_handling(ev_id, countdown=0.0)
            requeued += 1
        woken = do_wake_stale_commands()
    return {"advanced": advanced, "failed": failed, "requeued": requeued, "woken": woken}
