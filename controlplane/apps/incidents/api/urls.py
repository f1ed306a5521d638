from __future__ import annotations

from rest_framework.routers import BaseRouter

from controlplane.apps.incidents.api.views import FailureEventViewSet


def register(router: BaseRouter) -> None:
    router.register("failure-events", FailureEventViewSet, basename="failure-event")
