from __future__ import annotations

from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.apps.accounts.roles import Role
from controlplane.apps.accounts.viewsets import RoleGatedViewSet
from controlplane.apps.training.api.serializers import (
    ChangeWeightSerializer,
    CheckpointSerializer,
    TaskSerializer,
    TaskSubmitSerializer,
)
from controlplane.apps.training.models import TrainingTask
from controlplane.apps.training.selectors import list_checkpoints, list_tasks
from controlplane.apps.training.services import (
    do_cancel_task,
    do_change_weight,
    do_submit_task,
)


class TaskFilter(filters.FilterSet):  # type: ignore[misc]
    owner = filters.CharFilter(field_name="owner__username")
    name = filters.CharFilter(lookup_expr="icontains")
    state = filters.MultipleChoiceFilter(choices=TrainingTask._meta.get_field("state").choices)

    class Meta:
        model = TrainingTask
        fields = ["state", "owner", "name"]


class TaskViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, RoleGatedViewSet):
    queryset = list_tasks()
    filterset_class = TaskFilter
    ordering_fields = ["created_at", "weight", "name", "state"]
    action_roles = {"create": Role.OPERATOR, "change_weight": Role.OPERATOR, "cancel": Role.OPERATOR}

    serializer_class = TaskSerializer

    @extend_schema(request=TaskSubmitSerializer, responses={201: TaskSerializer})
    def create(self, request: Request) -> Response:
        """Submit a task; a spec that can never fit the cluster is refused with field errors."""
        data = TaskSubmitSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        task = do_submit_task(request.user, data.submission())
        return Response(TaskSerializer(task).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=ChangeWeightSerializer, responses=TaskSerializer)
    @action(detail=True, methods=["post"], url_path="change-weight")
    def change_weight(self, request: Request, pk: str | None = None) -> Response:
        """Reprioritise: set the task's weight w(t) >= 0 (operator)."""
        data = ChangeWeightSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        task = do_change_weight(request.user, self.get_object(), data.validated_data["weight"])
        return Response(TaskSerializer(task).data)

    @extend_schema(request=None, responses=CheckpointSerializer(many=True))
    @action(detail=True, methods=["get"])
    def checkpoints(self, request: Request, pk: str | None = None) -> Response:
        """The task's persistent checkpoints its agents reported saved, newest iteration first."""
        rows = list_checkpoints(self.get_object())
        return Response(CheckpointSerializer(rows, many=True).data)

    @extend_schema(request=None, responses=TaskSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Cancel the task and release its devices (operator)."""
        task = do_cancel_task(request.user, self.get_object())
        return Response(TaskSerializer(task).data)
