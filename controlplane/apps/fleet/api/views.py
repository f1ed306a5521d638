from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.apps.accounts.roles import Role
from controlplane.apps.accounts.viewsets import RoleGatedViewSet
from controlplane.apps.fleet.api.serializers import (
    DeviceSerializer,
    InjectedFaultSerializer,
    InjectFaultSerializer,
    NodeRegisteredSerializer,
    NodeRegisterSerializer,
    NodeSerializer,
)
from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.fleet.selectors import list_devices, list_nodes
from controlplane.apps.fleet.services import (
    DeviceSpec,
    FaultDrill,
    do_clear_quarantine,
    do_drain_node,
    do_inject_fault,
    do_register_node,
    do_return_device_to_service,
    do_return_node_to_service,
)

BY_OPERATOR = "returned to service by an operator"


class NodeFilter(filters.FilterSet):  # type: ignore[misc]
    name = filters.CharFilter(lookup_expr="icontains")

    class Meta:
        model = Node
        fields = ["state", "quarantined", "name"]


class NodeViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, RoleGatedViewSet):
    queryset = list_nodes()
    serializer_class = NodeSerializer
    filterset_class = NodeFilter
    ordering_fields = ["name", "state", "last_heartbeat_at"]
    action_roles = {
        "create": Role.ADMIN,
        "drain": Role.OPERATOR,
        "clear_quarantine": Role.OPERATOR,
        "return_to_service": Role.OPERATOR,
        "inject_fault": Role.OPERATOR,
    }

    @extend_schema(request=NodeRegisterSerializer, responses={201: NodeRegisteredSerializer})
    def create(self, request: Request) -> Response:
        """Register a node and its devices; the response carries the agent token, this once only."""
        data = NodeRegisterSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        devices = [DeviceSpec(d["index"], d["kind"], d["memory_bytes"]) for d in v["devices"]]
        node, token = do_register_node(request.user, v["name"], v["address"], devices)
        body = NodeRegisteredSerializer({"node": node, "token": token}).data
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=NodeSerializer)
    @action(detail=True, methods=["post"])
    def drain(self, request: Request, pk: str | None = None) -> Response:
        """Take the node out of service gracefully (operator)."""
        node = do_drain_node(request.user, self.get_object())
        return Response(NodeSerializer(node).data)

    @extend_schema(request=None, responses=NodeSerializer)
    @action(detail=True, methods=["post"], url_path="clear-quarantine")
    def clear_quarantine(self, request: Request, pk: str | None = None) -> Response:
        """Let a quarantined node back into plans (operator)."""
        node = do_clear_quarantine(request.user, self.get_object())
        return Response(NodeSerializer(node).data)

    @extend_schema(request=None, responses=NodeSerializer)
    @action(detail=True, methods=["post"], url_path="return-to-service")
    def return_to_service(self, request: Request, pk: str | None = None) -> Response:
        """Return an isolated node to service on probation (operator); a quarantined node needs its
        quarantine cleared instead. 409 when the node is not isolated."""
        node = do_return_node_to_service(
            request.user,
            self.get_object(),
            settings.UNICRON_PROBATION_S,
            "returned to service by an operator",
        )
        return Response(NodeSerializer(node).data)

    @extend_schema(request=InjectFaultSerializer, responses={202: InjectedFaultSerializer})
    @action(detail=True, methods=["post"], url_path="inject-fault")
    def inject_fault(self, request: Request, pk: str | None = None) -> Response:
        """Fault-injection drill (operator): queue an ``inject_fault`` command for the node's agent.

        crash / exception / hang / straggler / network_error need a task running on the node (and
        optionally one of its ranks there); node_loss takes the node's agent down with every worker.
        202: the command is queued (the agent acks it when the fault fires)."""
        data = InjectFaultSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        drill = FaultDrill(
            kind=v["fault"],
            task_id=v["task"],
            rank=v["rank"],
            at_iteration=v["at_iteration"],
            slowdown=v["slowdown"],
            message=v["message"],
        )
        command = do_inject_fault(request.user, self.get_object(), drill)
        return Response(InjectedFaultSerializer(command).data, status=status.HTTP_202_ACCEPTED)


class IdFilter(filters.Filter):  # type: ignore[misc]
    """A row id: a positive integer within a 64-bit primary key's range."""

    field_class = forms.IntegerField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", 2**63 - 1)
        super().__init__(*args, **kwargs)


class IdInFilter(filters.BaseInFilter, IdFilter):  # type: ignore[misc]
    """Comma-separated row ids (``?nodes=3,5,8``)."""


class DeviceFilter(filters.FilterSet):  # type: ignore[misc]
    node_name = filters.CharFilter(field_name="node__name")
    nodes = IdInFilter(field_name="node", lookup_expr="in", help_text="Comma-separated node ids.")

    class Meta:
        model = Device
        fields = ["node", "node_name", "state", "kind"]


class DeviceViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, RoleGatedViewSet):
    queryset = list_devices()
    serializer_class = DeviceSerializer
    filterset_class = DeviceFilter
    ordering_fields = ["node__name", "index", "state"]
    action_roles = {"return_to_service": Role.OPERATOR}

    @extend_schema(request=None, responses=DeviceSerializer)
    @action(detail=True, methods=["post"], url_path="return-to-service")
    def return_to_service(self, request: Request, pk: str | None = None) -> Response:
        """Return an isolated device to service on probation (operator). 409 when it is not isolated."""
        device = do_return_device_to_service(
            request.user,
            self.get_object(),
            settings.UNICRON_PROBATION_S,
            "returned to service by an operator",
        )
        return Response(DeviceSerializer(device).data)
