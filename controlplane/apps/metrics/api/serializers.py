from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import serializers

from controlplane.apps.metrics.choices import CLUSTER_KINDS, TASK_KINDS, MetricKind


class _SeriesQuerySerializer(serializers.Serializer[Any]):
    since = serializers.DateTimeField(
        required=False, help_text="Start (ISO 8601); default: the first sample."
    )
    until = serializers.DateTimeField(required=False, help_text="End (ISO 8601); default: now.")
    max_points = serializers.IntegerField(
        min_value=1,
        max_value=10_000,
        required=False,
        help_text="At most this many points: the range is cut into equal buckets, averaged in SQL.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        since, until = attrs.get("since"), attrs.get("until")
        if since is not None and until is not None and since >= until:
            raise serializers.ValidationError({"until": ["until must be after since."]})
        attrs.setdefault("max_points", settings.UNICRON_METRICS_MAX_POINTS)
        return attrs


def _choices(kinds: frozenset[MetricKind]) -> list[tuple[str, str]]:
    return [(k.value, k.label) for k in MetricKind if k in kinds]


class ClusterSeriesQuerySerializer(_SeriesQuerySerializer):
    kind = serializers.ChoiceField(
        choices=_choices(CLUSTER_KINDS), required=False, default=MetricKind.CLUSTER_WAF
    )


class TaskSeriesQuerySerializer(_SeriesQuerySerializer):
    kind = serializers.ChoiceField(
        choices=_choices(TASK_KINDS), required=False, default=MetricKind.ITERATION_TIME
    )


class PointSerializer(serializers.Serializer[Any]):
    at = serializers.DateTimeField(help_text="Bucket start.")
    value = serializers.FloatField(help_text="Average of the bucket's samples.")
    min = serializers.FloatField()
    max = serializers.FloatField()
    count = serializers.IntegerField()


class SeriesSerializer(serializers.Serializer[Any]):
    kind = serializers.CharField()
    task_id = serializers.IntegerField(allow_null=True)
    since = serializers.DateTimeField(allow_null=True)
    until = serializers.DateTimeField()
    bucket_seconds = serializers.FloatField()
    points = PointSerializer(many=True)
