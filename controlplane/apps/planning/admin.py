from __future__ import annotations

from django.contrib import admin

from controlplane.apps.planning.models import Plan, Transition, TransitionStep


@admin.register(Plan)
class PlanAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = [
        "created_at",
        "trigger",
        "expected_waf",
        "transition_cost",
        "d_running_s",
        "compute_time_ms",
    ]
    list_filter = ["trigger"]


class TransitionStepInline(admin.TabularInline):  # type: ignore[type-arg]
    model = TransitionStep
    extra = 0


@admin.register(Transition)
class TransitionAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["created_at", "plan", "task", "epoch", "state", "lost_microbatches", "finished_at"]
    list_filter = ["state"]
    readonly_fields = ["state"]
    inlines = [TransitionStepInline]


@admin.register(TransitionStep)
class TransitionStepAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["transition", "order", "name", "state", "started_at", "finished_at"]
    list_filter = ["state"]
    readonly_fields = ["state"]
