"""``/api/v1/alerts/``: operator alerts with their deliveries; an operator acknowledges and resolves them."""

from __future__ import annotations

from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.apps.accounts.roles import Role
from controlplane.apps.accounts.viewsets import RoleGatedViewSet
from controlplane.apps.common.serializers import CommentSerializer, RequiredCommentSerializer
from controlplane.apps.incidents.choices import AlertState, Severity
from controlplane.apps.incidents.models import Alert
from controlplane.apps.incidents.services import do_acknowledge_alert, do_resolve_alert
from controlplane.apps.notifications.api.serializers import AlertSerializer
from controlplane.apps.notifications.selectors import list_alerts


class AlertFilter(filters.FilterSet):  # type: ignore[misc]
    severity = filters.MultipleChoiceFilter(choices=Severity.choices)
    state = filters.MultipleChoiceFilter(choices=AlertState.choices)

    class Meta:
        model = Alert
        fields = ["severity", "state", "node"]


class AlertViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, RoleGatedViewSet):
    queryset = list_alerts()
    serializer_class = AlertSerializer
    filterset_class = AlertFilter
    ordering_fields = ["created_at", "severity", "state"]
    action_roles = {"acknowledge": Role.OPERATOR, "resolve": Role.OPERATOR}

    @extend_schema(request=CommentSerializer, responses=AlertSerializer)
    @action(detail=True, methods=["post"])
    def acknowledge(self, request: Request, pk: str | None = None) -> Response:
        """Acknowledge an open alert, optionally with a comment (operator)."""
        data = CommentSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        alert = do_acknowledge_alert(request.user, self.get_object(), data.validated_data["comment"])
        return Response(AlertSerializer(alert).data)

    @extend_schema(request=RequiredCommentSerializer, responses=AlertSerializer)
    @action(detail=True, methods=["post"])
    def resolve(self, request: Request, pk: str | None = None) -> Response:
        """Resolve an alert with a comment saying what was done (operator)."""
        data = RequiredCommentSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        alert = do_resolve_alert(request.user, self.get_object(), data.validated_data["comment"])
        return Response(AlertSerializer(alert).data)
