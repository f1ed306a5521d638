from __future__ import annotations

from django.urls import URLPattern, path

from controlplane.apps.metrics.api.views import ClusterSeriesView, SummaryView, TaskSeriesView

urlpatterns: list[URLPattern] = [
    path("metrics/cluster/", ClusterSeriesView.as_view(), name="metrics-cluster"),
    path("metrics/tasks/<int:task_id>/", TaskSeriesView.as_view(), name="metrics-task"),
    path("summary/", SummaryView.as_view(), name="summary"),
]
