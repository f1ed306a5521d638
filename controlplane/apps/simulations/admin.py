from __future__ import annotations

from django.contrib import admin

from controlplane.apps.simulations.models import SimulationRun


@admin.register(SimulationRun)
class SimulationRunAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("id", "trace", "days", "state", "progress", "requested_by", "created_at", "finished_at")
    list_filter = ("state", "trace")
    readonly_fields = ("report", "error", "cluster", "tasks")
