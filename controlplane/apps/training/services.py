"""Training services: submit, reprioritise, cancel, state transitions and device allocation."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from controlplane.apps.accounts.services import Actor, acting_user, do_record_audit
from controlplane.apps.common.broadcast import send_event_on_commit
from controlplane.apps.common.cas import swap_state
from controlplane.apps.common.errors import AllocationConflict, Conflict, InvalidInput
from controlplane.apps.common.triggers import request_replan
from controlplane.apps.training.choices import (
    CANCELLABLE_TASK_STATES,
    TASK_MACHINE,
    ParallelRole,
    TaskState,
)
from controlplane.apps.training.fit import TaskShape, fit_errors, list_cluster_kinds
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.apps.training.signals import task_cancelled
from controlplane.core.planning import GPTSpec
from controlplane.core.recipe import Recipe, recipe_for_spec


@dataclass(frozen=True)
class TaskSubmission:
    """A task to submit: its recipe (or only a model shape, trained on synthetic tokens) and scheduling."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    seq_length: int
    vocab_size: int
    global_batch_size: int
    micro_batch_size: int
    weight: float = 1.0
    min_workers: int = 1
    max_workers: int = 1
    allocation_unit: int = 1
    activation_recomputation: bool = False
    total_iterations: int = 1000
    recipe: Recipe | None = None
    """None: :func:`recipe_for_spec` of the shape above. Given: the shape above is its model and batch
    (build it with :meth:`from_recipe`)."""

    @classmethod
    def from_recipe(cls, name: str, recipe: Recipe, **scheduling: Any) -> TaskSubmission:
        """A submission whose model shape, batch and length come from ``recipe``; InvalidInput when the
        recipe leaves out ``model.vocab_size`` (the control plane sizes the model without reading the
        tokenizer, which lives on the nodes' file system)."""
        m = recipe.model
        if m.vocab_size is None:
            raise InvalidInput(
                {"recipe.model.vocab_size": ["required on submit: the tokenizer's (padded) vocabulary size."]}
            )
        return cls(
            name=name,
            num_layers=m.num_layers,
            hidden_size=m.hidden_size,
            num_attention_heads=m.num_attention_heads,
            seq_length=m.seq_length,
            vocab_size=m.vocab_size,
            global_batch_size=recipe.global_batch_size,
            micro_batch_size=recipe.micro_batch_size,
            total_iterations=recipe.iterations,
            recipe=recipe,
            **scheduling,
        )

    def task_recipe(self) -> Recipe:
        """The recipe the task stores (ValueError for a shape no GPT has)."""
        if self.recipe is not None:
            return self.recipe
        return recipe_for_spec(_spec(self), self.total_iterations)

    def columns(self) -> dict[str, Any]:
        """The task's columns: every field, the recipe as its JSON document."""
        fields = {f.name: getattr(self, f.name) for f in dataclass_fields(self)}
        fields["recipe"] = self.task_recipe().model_dump(mode="json", exclude_none=True)
        return fields


def task_event(task: TrainingTask) -> dict[str, Any]:
    return {
        "id": task.pk,
        "name": task.name,
        "state": task.state,
        "weight": task.weight,
        "epoch": task.epoch,
    }


# --- submission -----------------------------------------------------------------------------------


def _shape_errors(s: TaskSubmission) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    if s.weight < 0:
        errors["weight"] = ["Weight must be >= 0."]
    if s.min_workers < 1:
        errors["min_workers"] = ["min_workers must be >= 1."]
    if s.min_workers > s.max_workers:
        errors["max_workers"] = ["max_workers must be >= min_workers."]
    if s.allocation_unit < 1:
        errors["allocation_unit"] = ["allocation_unit must be >= 1."]
    elif s.max_workers % s.allocation_unit or s.min_workers % s.allocation_unit:
        errors["allocation_unit"] = ["min_workers and max_workers must be multiples of allocation_unit."]
    if s.num_attention_heads and s.hidden_size % s.num_attention_heads:
        errors["hidden_size"] = ["hidden_size must be divisible by num_attention_heads."]
    if s.total_iterations < 1:
        errors["total_iterations"] = ["total_iterations must be >= 1."]
    if s.micro_batch_size and s.global_batch_size % s.micro_batch_size:
        errors["global_batch_size"] = ["global_batch_size must be a multiple of micro_batch_size."]
    return errors


def _spec(s: TaskSubmission) -> GPTSpec:
    return GPTSpec(
        num_layers=s.num_layers,
        hidden_size=s.hidden_size,
        num_attention_heads=s.num_attention_heads,
        seq_length=s.seq_length,
        vocab_size=s.vocab_size,
        global_batch_size=s.global_batch_size,
        micro_batch_size=s.micro_batch_size,
    )


def check_submit_task(s: TaskSubmission) -> None:
    """Raise InvalidInput (field errors) for a malformed spec or one that can never fit the cluster."""
    errors = _shape_errors(s)
    if errors:
        raise InvalidInput(errors)
    try:
        spec = s.task_recipe().to_spec()
    except ValueError as exc:
        raise InvalidInput({"non_field_errors": [str(exc)]}) from exc
    shape = TaskShape(spec, s.min_workers, s.max_workers, s.allocation_unit)
    errors = fit_errors(shape, list_cluster_kinds())
    if errors:
        raise InvalidInput(errors)


@transaction.atomic
def do_submit_task(actor: Actor, submission: TaskSubmission) -> TrainingTask:
    check_submit_task(submission)
    owner = acting_user(actor)
    columns = submission.columns()
    task = TrainingTask.objects.create(owner=owner, **columns)
    do_record_audit(actor, "submit_task", task, after=columns)
    send_event_on_commit("task.submitted", task_event(task))
    request_replan("task_submitted")
    return task


# --- operator actions -----------------------------------------------------------------------------


def check_change_weight(task: TrainingTask, weight: float) -> None:
    if weight < 0:
        raise InvalidInput({"weight": ["Weight must be >= 0."]})
    if TASK_MACHINE.is_terminal(task.state):
        raise Conflict(f"Task {task.pk} is {task.state}; its weight can no longer change.")


@transaction.atomic
def do_change_weight(actor: Actor, task: TrainingTask, weight: float) -> TrainingTask:
    """Reprioritise a task (w(t) in WAF); the planner picks the change up through the event."""
    check_change_weight(task, weight)
    before = task.weight
    terminal = list(TASK_MACHINE.terminal)
    if TrainingTask.objects.filter(pk=task.pk).exclude(state__in=terminal).update(weight=weight) != 1:
        raise Conflict(f"Task {task.pk} finished while its weight was being changed.")
    task.refresh_from_db()
    do_record_audit(actor, "change_weight", task, {"weight": before}, {"weight": weight})
    send_event_on_commit("task.weight_changed", {**task_event(task), "old_weight": before})
    request_replan("weight_changed")
    return task


def check_cancel_task(task: TrainingTask) -> None:
    if task.state not in CANCELLABLE_TASK_STATES:
        raise Conflict(f"Task {task.pk} is {task.state} and cannot be cancelled.")


@transaction.atomic
def do_cancel_task(actor: Actor, task: TrainingTask) -> TrainingTask:
    """Cancel: release its devices, bump the epoch (fencing) and tell its nodes to stop its workers."""
    check_cancel_task(task)
    before = task.state
    now = timezone.now()
    swap_state(
        TrainingTask,
        task.pk,
        TASK_MACHINE,
        before,
        TaskState.CANCELLED,
        finished_at=now,
        epoch=F("epoch") + 1,
    )
    task.refresh_from_db()
    task_cancelled.send(sender=TrainingTask, task=task, node_ids=_release_allocations(task, now))
    do_record_audit(actor, "cancel_task", task, {"state": before}, {"state": task.state})
    send_event_on_commit("task.state", task_event(task))
    request_replan("task_finished")
    return task


@transaction.atomic
def do_set_task_state(task: TrainingTask, new: TaskState, *, bump_epoch: bool = False) -> TrainingTask:
    """Lifecycle transitions driven by the orchestrator (pending→running, running→reconfiguring …)."""
    fields: dict[str, Any] = {}
    if bump_epoch:
        fields["epoch"] = F("epoch") + 1
    if TASK_MACHINE.is_terminal(new):
        fields["finished_at"] = timezone.now()
    swap_state(TrainingTask, task.pk, TASK_MACHINE, task.state, new, **fields)
    task.refresh_from_db()
    if TASK_MACHINE.is_terminal(new):
        _release_allocations(task, timezone.now())
    send_event_on_commit("task.state", task_event(task))
    return task


def do_record_progress(task: TrainingTask, iteration: int) -> None:
    """Advance the iteration counter (never backwards)."""
    do_record_tasks_progress({task.pk: iteration})


def do_record_tasks_progress(iterations: dict[int, int]) -> int:
    """Advance the iteration counters of several tasks (task pk → iteration; never backwards) in one
    UPDATE that writes only the rows it advances. Returns how many it advanced."""
    if not iterations:
        return 0
    behind = Q()
    for pk, iteration in iterations.items():
        behind |= Q(pk=pk, iteration__lt=iteration)
    if len(iterations) == 1:
        ((pk, iteration),) = iterations.items()
        return TrainingTask.objects.filter(behind).update(iteration=iteration)
    value = Case(
        *(When(pk=pk, then=Value(it)) for pk, it in iterations.items()),
        default=F("iteration"),
        output_field=TrainingTask._meta.get_field("iteration"),
    )
    return TrainingTask.objects.filter(behind).update(iteration=value)


def do_rewind_progress(task: TrainingTask, iteration: int) -> bool:
    """Set the iteration counter back to ``iteration``, where a new epoch's ranks are, when it is past it:
    an epoch that resumed from an older state (a checkpoint, a peer behind the counter) redoes the
    iterations after it, and the counter says where training is, not the highest iteration ever
    reported. Returns whether it moved."""
    return TrainingTask.objects.filter(pk=task.pk, iteration__gt=iteration).update(iteration=iteration) == 1


@transaction.atomic
def do_bump_epoch(task: TrainingTask, **fields: Any) -> TrainingTask:
    """A new epoch without a state change (a task re-planned while already reconfiguring, a retry)."""
    TrainingTask.objects.filter(pk=task.pk).update(epoch=F("epoch") + 1, updated_at=timezone.now(), **fields)
    task.refresh_from_db()
    send_event_on_commit("task.epoch", task_event(task))
    return task


def do_set_task_plan_fields(
    task: TrainingTask, *, pending_reason: str | None = None, parallel_config: dict[str, Any] | None = None
) -> None:
    """The workload manager's notes on a task: why it waits, and the layout it runs with."""
    fields: dict[str, Any] = {}
    if pending_reason is not None and pending_reason != task.pending_reason:
        fields["pending_reason"] = pending_reason
    if parallel_config is not None:
        fields["parallel_config"] = parallel_config
    if fields:
        TrainingTask.objects.filter(pk=task.pk).update(**fields)
        for k, v in fields.items():
            setattr(task, k, v)
        if "pending_reason" in fields:
            send_event_on_commit("task.pending_reason", {**task_event(task), "reason": task.pending_reason})


def do_store_throughput_table(task: TrainingTask, table: dict[str, Any]) -> None:
    TrainingTask.objects.filter(pk=task.pk).update(throughput_table=table)
    task.throughput_table = table


@transaction.atomic
def do_mark_rank_finished(task: TrainingTask, epoch: int, rank: int) -> bool:
    """A rank of the current epoch exited after its last iteration. Returns True when that makes every
    rank of the task's active allocation finished (the task is then completed and its devices freed)."""
    locked = TrainingTask.objects.select_for_update(no_key=True).get(pk=task.pk)
    if locked.epoch != epoch or locked.state not in (TaskState.RUNNING, TaskState.RECONFIGURING):
        return False
    Allocation.objects.filter(task=locked, active=True, epoch=epoch, rank=rank, finished_at=None).update(
        finished_at=timezone.now()
    )
    active = Allocation.objects.filter(task=locked, active=True)
    if not active.exists() or active.filter(finished_at=None).exists():
        return False
    if locked.state == TaskState.RECONFIGURING:
        locked = do_set_task_state(locked, TaskState.RUNNING)
    do_set_task_state(locked, TaskState.COMPLETED)
    request_replan("task_finished")
    return True


# --- allocations -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    device_id: int
    rank: int
    role: ParallelRole = ParallelRole.WORKER
    tp_rank: int = 0
    pp_rank: int = 0
    dp_rank: int = 0


def _release_allocations(task: TrainingTask, now: Any) -> list[int]:
    """Release the task's active allocation; returns the ids of the nodes that held it."""
    active = Allocation.objects.filter(task=task, active=True)
    node_ids = set(active.values_list("device__node_id", flat=True))
    active.update(active=False, released_at=now)
    return sorted(node_ids)


def check_allocate_devices(task: TrainingTask, placements: list[Placement]) -> None:
    if TASK_MACHINE.is_terminal(task.state):
        raise Conflict(f"Task {task.pk} is {task.state}; it cannot get devices.")
    ranks = [p.rank for p in placements]
    devices = [p.device_id for p in placements]
    if len(set(ranks)) != len(ranks) or len(set(devices)) != len(devices):
        raise InvalidInput({"placements": ["Ranks and devices must be unique within an allocation."]})


def do_allocate_devices(task: TrainingTask, placements: list[Placement]) -> list[Allocation]:
    """Replace the task's active allocation with ``placements`` at the task's current epoch.

    That a device is in at most one active allocation is enforced by the database (a partial unique
    index); losing that race raises AllocationConflict and leaves nothing written.
    """
    check_allocate_devices(task, placements)
    try:
        with transaction.atomic():
            locked = TrainingTask.objects.select_for_update(no_key=True).get(pk=task.pk)
            if TASK_MACHINE.is_terminal(locked.state):
                raise Conflict(f"Task {task.pk} is {locked.state}; it cannot get devices.")
            now = timezone.now()
            Allocation.objects.filter(task=locked, active=True).update(active=False, released_at=now)
            allocations = Allocation.objects.bulk_create(
                Allocation(
                    task=locked,
                    device_id=p.device_id,
                    rank=p.rank,
                    role=p.role,
                    tp_rank=p.tp_rank,
                    pp_rank=p.pp_rank,
                    dp_rank=p.dp_rank,
                    epoch=locked.epoch,
                )
                for p in placements
            )
            send_event_on_commit(
                "task.allocated",
                {"id": locked.pk, "epoch": locked.epoch, "devices": [p.device_id for p in placements]},
            )
    except IntegrityError as exc:
        if "allocation_one_active_per_device" in str(exc):
            raise AllocationConflict(
                f"Task {task.pk}: a requested device is already in another task's active allocation."
            ) from exc
        raise
    return allocations


@transaction.atomic
def do_release_devices(task: TrainingTask) -> int:
    return Allocation.objects.filter(task=task, active=True).update(active=False, released_at=timezone.now())
