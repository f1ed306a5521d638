from __future__ import annotations

from django.contrib import admin

from controlplane.apps.metrics.models import MetricSample


@admin.register(MetricSample)
class MetricSampleAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["at", "kind", "task", "value", "iteration"]
    list_filter = ["kind"]
    date_hierarchy = "at"
