from __future__ import annotations

from rest_framework.routers import BaseRouter

from controlplane.apps.notifications.api.views import AlertViewSet


def register(router: BaseRouter) -> None:
    router.register("alerts", AlertViewSet, basename="alert")
