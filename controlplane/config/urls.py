"""HTTP routes: REST API under /api/v1/, OpenAPI schema and its UI, admin, health, dashboard."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from controlplane.config.store_outage import server_error_or_store_unavailable

handler500 = server_error_or_store_unavailable


def healthz(request: HttpRequest) -> JsonResponse:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("metrics", include("controlplane.apps.metrics.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", include("controlplane.apps.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # the split view serves its init script as a file: the Content-Security-Policy allows no inline script
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("api-auth/", include("rest_framework.urls")),
    path("", include("controlplane.apps.dashboard.urls")),
]
