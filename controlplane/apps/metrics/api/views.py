from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.apps.accounts.permissions import IsViewer
from controlplane.apps.metrics.api.serializers import (
    ClusterSeriesQuerySerializer,
    SeriesSerializer,
    SummarySerializer,
    TaskSeriesQuerySerializer,
)
from controlplane.apps.metrics.selectors import get_summary, list_series
from controlplane.apps.training.models import TrainingTask


class ClusterSeriesView(APIView):
    permission_classes = [IsViewer]

    @extend_schema(parameters=[ClusterSeriesQuerySerializer], responses=SeriesSerializer)
    def get(self, request: Request) -> Response:
        """Cluster WAF (or optimal WAF) over time, downsampled to at most ``max_points`` buckets."""
        q = ClusterSeriesQuerySerializer(data=request.query_params)
        q.is_valid(raise_exception=True)
        v = q.validated_data
        series = list_series(v["kind"], None, v.get("since"), v.get("until"), v["max_points"])
        return Response(SeriesSerializer(series).data)


class TaskSeriesView(APIView):
    permission_classes = [IsViewer]

    @extend_schema(parameters=[TaskSeriesQuerySerializer], responses=SeriesSerializer)
    def get(self, request: Request, task_id: int) -> Response:
        """A task's iteration time / tokens/s / achieved FLOP/s over time, downsampled."""
        task = get_object_or_404(TrainingTask, pk=task_id)
        q = TaskSeriesQuerySerializer(data=request.query_params)
        q.is_valid(raise_exception=True)
        v = q.validated_data
        series = list_series(v["kind"], task.pk, v.get("since"), v.get("until"), v["max_points"])
        return Response(SeriesSerializer(series).data)


class SummaryView(APIView):
    permission_classes = [IsViewer]

    @extend_schema(responses=SummarySerializer)
    def get(self, request: Request) -> Response:
        """Headline figures of the overview: current WAF and its share of the healthy-cluster optimum,
        goodput over the last hour, failures in the last hour / day, mean detection latency and mean
        transition time (all computed in SQL)."""
        return Response(SummarySerializer(get_summary()).data)
