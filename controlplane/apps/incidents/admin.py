from __future__ import annotations

from django.contrib import admin

from controlplane.apps.incidents.models import Alert, FailureEvent


@admin.register(FailureEvent)
class FailureEventAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = [
        "detected_at",
        "severity",
        "kind",
        "detector",
        "node",
        "device",
        "task",
        "action",
        "resolved_at",
    ]
    list_filter = ["severity", "detector", "action"]
    search_fields = ["kind", "summary"]
    readonly_fields = ["report_id", "handling_claimed_at"]


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["created_at", "severity", "state", "node", "message", "acknowledged_by", "resolved_by"]
    list_filter = ["severity", "state"]
    search_fields = ["message"]
    readonly_fields = ["state", "acknowledged_by", "acknowledged_at", "resolved_by", "resolved_at"]
