"""Training queries."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from controlplane.apps.training.models import Allocation, TrainingTask


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
