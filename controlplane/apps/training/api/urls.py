from __future__ import annotations

from rest_framework.routers import BaseRouter

from controlplane.apps.training.api.views import TaskViewSet


def register(router: BaseRouter) -> None:
    router.register("tasks", TaskViewSet, basename="task")
