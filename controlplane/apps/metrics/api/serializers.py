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


class LatestSampleSerializer(serializers.Serializer[Any]):
    value = serializers.FloatField()
    at = serializers.DateTimeField()


class SummarySerializer(serializers.Serializer[Any]):
    """The overview's headline figures, computed in SQL (see metrics.selectors.get_summary)."""

    at = serializers.DateTimeField(help_text="When the figures were computed.")
    waf = LatestSampleSerializer(
        allow_null=True, help_text="The latest achieved cluster WAF sample (FLOP/s); null before the first."
    )
    optimum = LatestSampleSerializer(
        allow_null=True, help_text="The latest healthy-cluster optimum sample (FLOP/s)."
    )
    share_of_optimum = serializers.FloatField(
        allow_null=True, help_text="waf ÷ optimum (null when either is unknown or the optimum is 0)."
    )
    optimum_tasks = serializers.IntegerField(help_text="Tasks the optimum plans for.")
    optimum_tasks_measured = serializers.IntegerField(
        help_text="Of those, tasks planned with their measured throughput (calibrated from their iteration "
        "times); the others with the modelled one."
    )
    goodput_1h = serializers.FloatField(
        allow_null=True,
        source="goodput_1h.ratio",
        help_text="Share of scheduled task time spent in useful iterations over the last hour.",
    )
    goodput_useful_s = serializers.FloatField(source="goodput_1h.useful_s")
    goodput_scheduled_s = serializers.FloatField(source="goodput_1h.scheduled_s")
    failures_1h = serializers.IntegerField()
    failures_24h = serializers.IntegerField()
    failures_24h_by_severity = serializers.DictField(child=serializers.IntegerField())
    mean_detection_latency_s = serializers.FloatField(
        allow_null=True, help_text="Mean occurred → detected over the last 24 h."
    )
    detection_samples = serializers.IntegerField()
    mean_transition_s = serializers.FloatField(
        allow_null=True, help_text="Mean started → finished of transitions completed in the last 24 h."
    )
    transitions_24h = serializers.IntegerField()
