from __future__ import annotations

from rest_framework.routers import BaseRouter

from controlplane.apps.fleet.api.device_map import DeviceMapViewSet
from controlplane.apps.fleet.api.views import DeviceViewSet, NodeViewSet


def register(router: BaseRouter) -> None:
    router.register("nodes", NodeViewSet, basename="node")
    router.register("devices", DeviceViewSet, basename="device")
    router.register("device-map", DeviceMapViewSet, basename="device-map")
