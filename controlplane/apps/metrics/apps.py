from __future__ import annotations

from django.apps import AppConfig


class MetricsConfig(AppConfig):
    name = "controlplane.apps.metrics"
    label = "metrics"
    verbose_name = "Metrics: iteration times, throughput, WAF"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from controlplane.apps.metrics.celery_latency import connect_signals

        connect_signals()  # every process that publishes or runs Celery tasks records queueing delay

        from controlplane.apps.metrics.selectors import list_recent_iteration_times
        from controlplane.apps.planning.measurements import register_iteration_times

        register_iteration_times(list_recent_iteration_times)  # calibration reads the measured times
