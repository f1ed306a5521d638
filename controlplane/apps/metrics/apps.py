from __future__ import annotations

from django.apps import AppConfig


class MetricsConfig(AppConfig):
    name = "controlplane.apps.metrics"
    label = "metrics"
    verbose_name = "Metrics: iteration times, throughput, WAF"
    default_auto_field = "django.db.models.BigAutoField"
