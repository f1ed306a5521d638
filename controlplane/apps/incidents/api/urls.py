from __future__ import annotations

from rest_framework.routers import BaseRouter

from controlplane.apps.incidents.api.views import AlertViewSet, FailureEventViewSet


def register(router: BaseRouter) -> None:
    router.register("failure-events", FailureEventViewSet, basename="failure-event")
    router.register("alerts", AlertViewSet, basename="alert")
