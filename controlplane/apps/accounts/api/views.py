from __future__ import annotations

from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema
from rest_framework import mixins
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.apps.accounts.api.serializers import AuditEntrySerializer, MeSerializer
from controlplane.apps.accounts.models import AuditEntry
from controlplane.apps.accounts.permissions import IsViewer
from controlplane.apps.accounts.roles import Role, get_user_role
from controlplane.apps.common.viewsets import RoleGatedViewSet


class AuditEntryFilter(filters.FilterSet):  # type: ignore[misc]
    since = filters.IsoDateTimeFilter(field_name="at", lookup_expr="gte")
    until = filters.IsoDateTimeFilter(field_name="at", lookup_expr="lte")

    class Meta:
        model = AuditEntry
        fields = ["verb", "object_type", "object_id", "actor"]


class AuditEntryViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, RoleGatedViewSet):
    """Who changed what (operators and admins)."""

    queryset = AuditEntry.objects.all()
    serializer_class = AuditEntrySerializer
    filterset_class = AuditEntryFilter
    ordering_fields = ["at"]
    action_roles = {"list": Role.OPERATOR, "retrieve": Role.OPERATOR}


class MeView(APIView):
    """The calling user and their role."""

    permission_classes = [IsViewer]

    @extend_schema(responses=MeSerializer)
    def get(self, request: Request) -> Response:
        role = get_user_role(request.user)
        return Response(MeSerializer({"username": request.user.get_username(), "role": role}).data)
