"""Training queries."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from controlplane.apps.training.models import Allocation, Checkpoint, TrainingTask
from controlplane.core.planning import GPTSpec
from controlplane.core.recipe import Recipe, recipe_for_spec, recipe_from_mapping

_PK_DIGITS = 18
"""A task id is the decimal primary key of a ``bigint`` row: at most 18 digits are always in range."""


def task_pk(task_id: str) -> int | None:
    """The task's primary key for a wire task id, or None when it cannot name a task row."""
    if not task_id or len(task_id) > _PK_DIGITS or not task_id.isascii() or not task_id.isdigit():
        return None
    return int(task_id)


def list_tasks() -> QuerySet[TrainingTask]:
    """Tasks with their owner and active allocations (as ``active_allocations``, by rank)."""
    active = Allocation.objects.filter(active=True).select_related("device__node").order_by("rank")
    return TrainingTask.objects.select_related("owner").prefetch_related(
        Prefetch("allocations", queryset=active, to_attr="active_allocations")
    )


def get_task(pk: int) -> TrainingTask:
    return TrainingTask.objects.get(pk=pk)


def list_active_allocations(task: TrainingTask | None = None) -> QuerySet[Allocation]:
    qs = Allocation.objects.filter(active=True).select_related("device", "device__node")
    return qs.filter(task=task) if task is not None else qs


def get_task_recipe(task: TrainingTask) -> Recipe:
    """The task's stored recipe; a task stored without one (created directly, not through submit) has
    the synthetic-data recipe of its model spec columns."""
    if task.recipe:
        return recipe_from_mapping(task.recipe)
    spec = GPTSpec(
        num_layers=task.num_layers,
        hidden_size=task.hidden_size,
        num_attention_heads=task.num_attention_heads,
        seq_length=task.seq_length,
        vocab_size=task.vocab_size,
        global_batch_size=task.global_batch_size,
        micro_batch_size=task.micro_batch_size,
    )
    return recipe_for_spec(spec, task.total_iterations)


def get_task_spec(task: TrainingTask) -> GPTSpec:
    """The planning core's model of the task, from its recipe (grouped-query attention, SwiGLU, untied
    embeddings and rotary positions change its FLOPs, parameters and memory)."""
    return get_task_recipe(task).to_spec(task.vocab_size)


def list_checkpoints(task: TrainingTask) -> QuerySet[Checkpoint]:
    """The task's reported checkpoints, newest iteration first."""
    return Checkpoint.objects.filter(task=task).order_by("-iteration")


def latest_checkpoint_iteration(task: TrainingTask) -> int | None:
    """The newest iteration a persistent checkpoint of ``task`` was reported saved at (None: none yet)."""
    return list_checkpoints(task).values_list("iteration", flat=True).first()
