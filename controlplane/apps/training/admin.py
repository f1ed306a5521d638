from __future__ import annotations

from django.contrib import admin

from controlplane.apps.training.models import Allocation, TrainingTask


class AllocationInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Allocation
    extra = 0
    readonly_fields = ["active", "created_at", "released_at"]


@admin.register(TrainingTask)
class TrainingTaskAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["name", "owner", "state", "weight", "min_workers", "max_workers", "epoch", "iteration"]
    list_filter = ["state"]
    search_fields = ["name"]
    readonly_fields = ["state", "epoch", "created_at", "updated_at", "finished_at"]
    inlines = [AllocationInline]


@admin.register(Allocation)
class AllocationAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["task", "device", "rank", "role", "epoch", "active", "created_at"]
    list_filter = ["active", "role"]
