from __future__ import annotations

from typing import cast

from django.contrib.auth.models import User
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema
from rest_framework import mixins
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.apps.accounts.api.serializers import (
    ApiTokenSerializer,
    AuditEntrySerializer,
    IssuedApiTokenSerializer,
    MeSerializer,
)
from controlplane.apps.accounts.models import AuditEntry
from controlplane.apps.accounts.permissions import IsViewer
from controlplane.apps.accounts.roles import Role, get_user_role
from controlplane.apps.accounts.selectors import list_api_tokens
from controlplane.apps.accounts.services import do_rotate_api_token
from controlplane.apps.accounts.viewsets import RoleGatedViewSet


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


class MyTokenView(APIView):
    """The calling user's REST API token: GET describes it (never the key); POST rotates it (the previous
    key stops working) and returns the new key once."""

    permission_classes = [IsViewer]

    @extend_schema(responses=ApiTokenSerializer(many=True))
    def get(self, request: Request) -> Response:
        tokens = list_api_tokens(cast(User, request.user).pk)
        return Response(ApiTokenSerializer(tokens, many=True).data)

    @extend_schema(request=None, responses={201: IssuedApiTokenSerializer})
    def post(self, request: Request) -> Response:
        # IsViewer: an authenticated user. The row itself, not the session's lazy proxy of it: the audit
        # entry names the object's model.
        user = User.objects.get(pk=cast(User, request.user).pk)
        token, key = do_rotate_api_token(user, user)
        body = {"token": key, "prefix": token.prefix, "expires_at": token.expires_at}
        return Response(IssuedApiTokenSerializer(body).data, status=201)
