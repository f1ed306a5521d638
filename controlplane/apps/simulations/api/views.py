from __future__ import annotations

from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.apps.accounts.roles import Role
from controlplane.apps.accounts.viewsets import RoleGatedViewSet
from controlplane.apps.simulations.api.serializers import SimulationRequestSerializer, SimulationRunSerializer
from controlplane.apps.simulations.models import SimulationRun
from controlplane.apps.simulations.services import do_request_simulation


class SimulationRunFilter(filters.FilterSet):  # type: ignore[misc]
    class Meta:
        model = SimulationRun
        fields = ["state", "trace"]


class SimulationRunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, RoleGatedViewSet):
    """What-if runs: the live cluster's nodes and tasks replayed against a failure trace per policy."""

    queryset = SimulationRun.objects.select_related("requested_by")
    serializer_class = SimulationRunSerializer
    filterset_class = SimulationRunFilter
    ordering_fields = ["created_at"]
    action_roles = {"create": Role.OPERATOR}

    @extend_schema(request=SimulationRequestSerializer, responses={202: SimulationRunSerializer})
    def create(self, request: Request) -> Response:
        """Queue a what-if simulation of the live cluster under a failure trace (operator)."""
        data = SimulationRequestSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run = do_request_simulation(request.user, **data.validated_data)
        return Response(SimulationRunSerializer(run).data, status=status.HTTP_202_ACCEPTED)
