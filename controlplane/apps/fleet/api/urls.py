from __future__ import annotations

from rest_framework.routers import BaseRouter

from controlplane.apps.fleet.api.views import DeviceViewSet, NodeViewSet


def register(router: BaseRouter) -> None:
    router.register("nodes", NodeViewSet, basename="node")
    router.register("devices", DeviceViewSet, basename="device")
