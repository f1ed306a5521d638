from __future__ import annotations

from django import forms
from django.contrib import admin
from rest_framework.exceptions import ValidationError as ApiValidationError

from controlplane.apps.accounts.audited_admin import AuditedModelAdmin
from controlplane.apps.training.api.serializers import check_task_weight
from controlplane.apps.training.models import Allocation, Checkpoint, TrainingTask


class TrainingTaskForm(forms.ModelForm):  # type: ignore[type-arg]
    """The admin refuses the weights the API refuses (finite, 0 ≤ w ≤ MAX_TASK_WEIGHT)."""

    class Meta:
        model = TrainingTask
        fields = ["weight"]  # the admin adds the others it shows

    def clean_weight(self) -> float:
        weight = float(self.cleaned_data["weight"])
        try:
            check_task_weight(weight)
        except ApiValidationError as exc:
            raise forms.ValidationError([str(detail) for detail in exc.detail]) from exc
        return weight


class AllocationInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Allocation
    extra = 0
    readonly_fields = ["active", "created_at", "released_at"]


@admin.register(TrainingTask)
class TrainingTaskAdmin(AuditedModelAdmin):
    form = TrainingTaskForm
    list_display = ["name", "owner", "state", "weight", "min_workers", "max_workers", "epoch", "iteration"]
    list_filter = ["state"]
    search_fields = ["name"]
    # the recipe was validated on submit and the shape columns are its projection: not edited here
    readonly_fields = ["state", "epoch", "recipe", "created_at", "updated_at", "finished_at"]
    inlines = [AllocationInline]


@admin.register(Allocation)
class AllocationAdmin(AuditedModelAdmin):
    list_display = ["task", "device", "rank", "role", "epoch", "active", "created_at"]
    list_filter = ["active", "role"]


@admin.register(Checkpoint)
class CheckpointAdmin(AuditedModelAdmin):
    list_display = ["task", "iteration", "size_bytes", "validation_loss", "saved_at"]
    search_fields = ["task__name", "path"]
    readonly_fields = [
        "task",
        "iteration",
        "path",
        "size_bytes",
        "validation_loss",
        "epoch",
        "rank",
        "saved_at",
        "recorded_at",
    ]
