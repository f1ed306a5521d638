from __future__ import annotations

from rest_framework import serializers

from controlplane.apps.notifications.models import AlertDelivery


class AlertDeliverySerializer(serializers.ModelSerializer[AlertDelivery]):
    """A delivery as the API and the dashboard show it (the route by name: its URL and secret stay out)."""

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
