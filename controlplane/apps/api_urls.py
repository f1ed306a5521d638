"""REST API v1 routes (mounted under /api/v1/ by controlplane.config.urls)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, include, path
from rest_framework.routers import DefaultRouter

from controlplane.apps.accounts.api import urls as accounts_urls
from controlplane.apps.fleet.api import urls as fleet_urls
from controlplane.apps.incidents.api import urls as incidents_urls
from controlplane.apps.metrics.api import urls as metrics_urls
from controlplane.apps.notifications.api import urls as notifications_urls
from controlplane.apps.planning.api import urls as planning_urls
from controlplane.apps.simulations.api import urls as simulations_urls
from controlplane.apps.training.api import urls as training_urls

router = DefaultRouter()
for app in (
    accounts_urls,
    fleet_urls,
    training_urls,
    incidents_urls,
    notifications_urls,
    planning_urls,
    simulations_urls,
):
    app.register(router)

urlpatterns: list[URLPattern | URLResolver] = [
    *accounts_urls.urlpatterns,
    *metrics_urls.urlpatterns,
    path("", include(router.urls)),
]
