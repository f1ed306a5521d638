from __future__ import annotations

from django_filters import rest_framework as filters
from rest_framework import mixins

from controlplane.apps.accounts.viewsets import RoleGatedViewSet
from controlplane.apps.planning.api.serializers import PlanSerializer, TransitionSerializer
from controlplane.apps.planning.models import Plan, Transition
from controlplane.apps.planning.selectors import list_plans, list_transitions


class PlanFilter(filters.FilterSet):  # type: ignore[misc]
    since = filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    until = filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lte")

    class Meta:
        model = Plan
        fields = ["trigger", "failure_event"]


class PlanViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, RoleGatedViewSet):
    queryset = list_plans()
    serializer_class = PlanSerializer
    filterset_class = PlanFilter
    ordering_fields = ["created_at", "expected_waf"]


class TransitionFilter(filters.FilterSet):  # type: ignore[misc]
    class Meta:
        model = Transition
        fields = ["plan", "task", "state"]


class TransitionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, RoleGatedViewSet):
    queryset = list_transitions()
    serializer_class = TransitionSerializer
    filterset_class = TransitionFilter
    ordering_fields = ["created_at", "epoch"]
