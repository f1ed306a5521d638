"""``/metrics``: the Prometheus exposition."""

from __future__ import annotations

from django.urls import path

from controlplane.apps.metrics.views import metrics

urlpatterns = [path("", metrics, name="metrics")]
