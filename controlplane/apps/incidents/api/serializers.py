from __future__ import annotations

from rest_framework import serializers

from controlplane.apps.incidents.models import FailureEvent


class FailureEventSerializer(serializers.ModelSerializer[FailureEvent]):
    node_name = serializers.CharField(source="node.name", read_only=True, allow_null=True, default=None)

    class Meta:
        model = FailureEvent
        fields = [
            "id",
            "report_id",
            "detector",
            "kind",
            "summary",
            "node",
            "node_name",
            "device",
            "task",
            "evidence",
            "severity",
            "action",
            "occurred_at",
            "detected_at",
            "resolved_at",
            "escalated_from",
        ]
