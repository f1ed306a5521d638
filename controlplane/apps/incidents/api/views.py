from __future__ import annotations

from django_filters import rest_framework as filters
from rest_framework import mixins

from controlplane.apps.accounts.viewsets import RoleGatedViewSet
from controlplane.apps.incidents.api.serializers import FailureEventSerializer
from controlplane.apps.incidents.choices import Severity
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.incidents.selectors import list_failure_events


class FailureEventFilter(filters.FilterSet):  # type: ignore[misc]
    severity = filters.MultipleChoiceFilter(choices=Severity.choices)
    resolved = filters.BooleanFilter(field_name="resolved_at", lookup_expr="isnull", exclude=True)
    since = filters.IsoDateTimeFilter(field_name="detected_at", lookup_expr="gte")
    until = filters.IsoDateTimeFilter(field_name="detected_at", lookup_expr="lte")

    class Meta:
        model = FailureEvent
        fields = ["severity", "detector", "kind", "action", "node", "device", "task", "resolved"]


class FailureEventViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, RoleGatedViewSet):
    queryset = list_failure_events()
    serializer_class = FailureEventSerializer
    filterset_class = FailureEventFilter
    ordering_fields = ["detected_at", "occurred_at", "severity"]
