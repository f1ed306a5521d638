from __future__ import annotations

from rest_framework.routers import BaseRouter

from controlplane.apps.simulations.api.views import SimulationRunViewSet


def register(router: BaseRouter) -> None:
    router.register("simulations", SimulationRunViewSet, basename="simulation")
