from __future__ import annotations

from rest_framework.routers import BaseRouter

from controlplane.apps.planning.api.views import PlanViewSet, TransitionViewSet


def register(router: BaseRouter) -> None:
    router.register("plans", PlanViewSet, basename="plan")
    router.register("transitions", TransitionViewSet, basename="transition")
