"""Planning queries."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from controlplane.apps.planning.models import Plan, Transition, TransitionStep


def list_plans() -> QuerySet[Plan]:
    return Plan.objects.all()


def list_transitions() -> QuerySet[Transition]:
    steps = Prefetch("steps", queryset=TransitionStep.objects.order_by("order"))
    return Transition.objects.select_related("plan", "task").prefetch_related(steps)
