"""``GET /api/v1/device-map/``: the whole fleet in one compact response, for the dashboard's nodes x devices
map (a page of the node and device lists would show a fleet of thousands of nodes in part only)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.apps.accounts.viewsets import RoleGatedViewSet
from controlplane.apps.fleet.models import Device
from controlplane.apps.fleet.selectors import get_device_map


class DeviceMapSerializer(serializers.Serializer):  # type: ignore[type-arg]
    nodes = serializers.ListField(
        child=serializers.ListField(), help_text="[id, name, state, quarantined] per node, by name."
    )
    devices = serializers.ListField(
        child=serializers.ListField(),
        help_text="[id, node id, index, kind, state, task id or null, rank or null] per device.",
    )
    tasks = serializers.ListField(
        child=serializers.ListField(), help_text="[id, name, state] of each task holding devices."
    )
    task_states = serializers.DictField(child=serializers.IntegerField(), help_text="Tasks by state.")


class DeviceMapViewSet(RoleGatedViewSet):
    serializer_class = DeviceMapSerializer
    pagination_class = None
    queryset = Device.objects.none()  # for the schema generator: the map is not a model list

    @extend_schema(responses=DeviceMapSerializer)
    def list(self, request: Request) -> Response:
        """Every node, device and active allocation in four queries, whatever the fleet size."""
        return Response(DeviceMapSerializer(get_device_map()).data)
