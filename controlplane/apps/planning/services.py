"""Planning services: persist plans, start transitions and advance them step by step (CAS)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from controlplane.apps.common.broadcast import send_event_on_commit
from controlplane.apps.common.cas import swap_state
from controlplane.apps.common.errors import StaleState
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.planning.choices import (
    STEP_MACHINE,
    TRANSITION_MACHINE,
    PlanTrigger,
    StepState,
    TransitionState,
)
from controlplane.apps.planning.models import Plan, Transition, TransitionStep
from controlplane.apps.planning.records import TaskDecision
from controlplane.apps.training.models import TrainingTask
from controlplane.core.transitions.steps import StepDetail


@dataclass(frozen=True)
class PlanRecord:
    trigger: PlanTrigger
    input_snapshot: dict[str, Any]
    decisions: Sequence[TaskDecision | dict[str, Any]]
    """Validated as :class:`~controlplane.apps.planning.records.TaskDecision` rows when recorded."""
    expected_waf: float
    transition_cost: float
    d_running_s: float
    compute_time_ms: float
    failure_event: FailureEvent | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    lookup: bool = False
    explanation: str = ""


@transaction.atomic
def do_record_plan(record: PlanRecord) -> Plan:
    decisions = [TaskDecision.model_validate(d).stored() for d in record.decisions]
    plan = Plan.objects.create(
        trigger=record.trigger,
        failure_event=record.failure_event,
        input_snapshot=record.input_snapshot,
        decisions=decisions,
        expected_waf=record.expected_waf,
        transition_cost=record.transition_cost,
        d_running_s=record.d_running_s,
        compute_time_ms=record.compute_time_ms,
        lookup=record.lookup,
        explanation=record.explanation,
    )
    send_event_on_commit(
        "plan.created",
        {
            "id": plan.pk,
            "trigger": plan.trigger,
            "expected_waf": plan.expected_waf,
            "decisions": plan.decisions,
            "lookup": plan.lookup,
            "compute_time_ms": plan.compute_time_ms,
        },
    )
    return plan


def transition_payload(t: Transition) -> dict[str, Any]:
    return {
        "id": t.pk,
        "plan": t.plan_id,
        "task": t.task_id,
        "state": t.state,
        "epoch": t.epoch,
        "kind": t.kind,
        "old_workers": t.old_workers,
        "new_workers": t.new_workers,
        "error": t.error,
    }


@transaction.atomic
def do_create_transition(
    plan: Plan,
    task: TrainingTask,
    step_names: list[str],
    old_workers: int,
    new_workers: int,
    *,
    step_details: list[StepDetail] | None = None,
    step_deadlines: list[datetime | None] | None = None,
    **fields: Any,
) -> Transition:
    """A pending transition of ``task`` to the next epoch, with its steps in order."""
    t = Transition.objects.create(
        plan=plan, task=task, epoch=task.epoch + 1, old_workers=old_workers, new_workers=new_workers, **fields
    )
    details = [d.stored() for d in step_details] if step_details else [{} for _ in step_names]
    deadlines = step_deadlines or [None for _ in step_names]
    TransitionStep.objects.bulk_create(
        TransitionStep(transition=t, order=i, name=name, detail=details[i], deadline_at=deadlines[i])
        for i, name in enumerate(step_names)
    )
    send_event_on_commit("transition.created", transition_payload(t))
    return t


@transaction.atomic
def do_set_transition_state(
    t: Transition, new: TransitionState, error: str = "", **fields: Any
) -> Transition:
    now = timezone.now()
    if new == TransitionState.RUNNING:
        fields["started_at"] = now
    if TRANSITION_MACHINE.is_terminal(new):
        fields["finished_at"] = now
    swap_state(Transition, t.pk, TRANSITION_MACHINE, t.state, new, error=error, **fields)
    t.refresh_from_db()
    send_event_on_commit("transition.state", transition_payload(t))
    return t


@transaction.atomic
def do_set_step_state(
    step: TransitionStep, new: StepState, detail: StepDetail | None = None
) -> TransitionStep:
    """Move ``step`` to ``new`` (compare-and-swap on its state), storing ``detail`` when given."""
    now = timezone.now()
    fields: dict[str, Any] = {}
    if new == StepState.RUNNING:
        fields["started_at"] = now
    if STEP_MACHINE.is_terminal(new):
        fields["finished_at"] = now
    if detail is not None:
        fields["detail"] = detail.stored()
    swap_state(TransitionStep, step.pk, STEP_MACHINE, step.state, new, **fields)
    step.refresh_from_db()
    send_event_on_commit(
        "transition.step",
        {"transition": step.transition_id, "order": step.order, "name": step.name, "state": step.state},
    )
    return step


def do_record_step_detail(step: TransitionStep, detail: StepDetail) -> None:
    """Store what ``step`` carries (its state unchanged; the caller holds the step row's lock)."""
    do_record_step_details([(step, detail)])


def do_record_step_details(details: list[tuple[TransitionStep, StepDetail]]) -> None:
    """Store what several steps carry in one UPDATE (the caller holds their rows' locks)."""
    for step, detail in details:
        step.detail = detail.stored()
    if len(details) == 1:
        ((step, _),) = details
        TransitionStep.objects.filter(pk=step.pk).update(detail=step.detail)
    elif details:
        TransitionStep.objects.bulk_update([step for step, _ in details], ["detail"])


def do_skip_open_steps(t: Transition) -> None:
    """Skip ``t``'s steps not yet finished (its transition ended without them): each a compare-and-swap, a
    step finished meanwhile keeps the state it reached."""
    for step in TransitionStep.objects.filter(transition=t, state__in=[StepState.PENDING, StepState.RUNNING]):
        try:
            do_set_step_state(step, StepState.SKIPPED)
        except StaleState:
            continue


def do_fail_running_steps(t: Transition) -> None:
    """Fail ``t``'s running steps (its transition failed): each a compare-and-swap."""
    for step in TransitionStep.objects.filter(transition=t, state=StepState.RUNNING):
        try:
            do_set_step_state(step, StepState.FAILED)
        except StaleState:
            continue
