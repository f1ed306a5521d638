"""Alerts as the API and the dashboard show them: each with its deliveries to the notification routes."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from controlplane.apps.incidents.models import Alert
from controlplane.apps.notifications.models import AlertDelivery


class AlertDeliverySerializer(serializers.ModelSerializer[AlertDelivery]):
    """A delivery as the API and the dashboard show it with its alert (the route by name: its URL and
    secret stay out)."""

    route = serializers.CharField(source="route_name", read_only=True)

    class Meta:
        model = AlertDelivery
        fields = [
            "id",
            "route",
            "event",
            "state",
            "attempts",
            "last_error",
            "created_at",
            "next_attempt_at",
            "sent_at",
            "failed_at",
        ]
        read_only_fields = fields


class AlertSerializer(serializers.ModelSerializer[Alert]):
    acknowledged_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    resolved_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    node_name = serializers.CharField(source="node.name", read_only=True, allow_null=True, default=None)
    deliveries = AlertDeliverySerializer(many=True, read_only=True)

    class Meta:
        model = Alert
        fields = [
            "id",
            "severity",
            "state",
            "message",
            "source_event",
            "node",
            "node_name",
            "created_at",
            "acknowledged_by",
            "acknowledged_at",
            "acknowledge_comment",
            "resolved_by",
            "resolved_at",
            "resolve_comment",
            "deliveries",
        ]
