"""Notification queries."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Prefetch, QuerySet

from controlplane.apps.incidents.models import Alert
from controlplane.apps.notifications.choices import DeliveryEvent, DeliveryState
from controlplane.apps.notifications.models import AlertDelivery, AlertRoute
from controlplane.apps.notifications.payload import alert_kind
from controlplane.apps.notifications.rules import route_matches


def list_routes_for_alert(alert: Alert) -> list[AlertRoute]:
    """The enabled routes whose severity and kind filters take ``alert``."""
    kind = alert_kind(alert)
    return [
        r
        for r in AlertRoute.objects.filter(enabled=True)
        if route_matches(r.min_severity, r.severities, r.kinds, alert.severity, kind)
    ]


def list_routes_that_got_firing(alert: Alert) -> list[AlertRoute]:
    """Routes with a firing of ``alert`` that was sent or is still on its way (not failed for good)."""
    return list(
        AlertRoute.objects.filter(
            deliveries__alert=alert,
            deliveries__event=DeliveryEvent.FIRED,
            deliveries__state__in=[DeliveryState.PENDING, DeliveryState.SENDING, DeliveryState.SENT],
        ).distinct()
    )


def get_delivery_for_sending(delivery_id: int) -> AlertDelivery | None:
    return (
        AlertDelivery.objects.select_related("alert__node", "alert__source_event", "route")
        .filter(pk=delivery_id)
        .first()
    )


def get_firing_state(delivery: AlertDelivery) -> str | None:
    """The state of the firing that a resolution delivery follows (None when there is none)."""
    return (
        AlertDelivery.objects.filter(
            alert_id=delivery.alert_id, route_id=delivery.route_id, event=DeliveryEvent.FIRED
        )
        .values_list("state", flat=True)
        .first()
    )


def list_deliveries(alert_id: int | None = None) -> QuerySet[AlertDelivery]:
    qs = AlertDelivery.objects.select_related("route")
    return qs if alert_id is None else qs.filter(alert_id=alert_id)


def list_alerts() -> QuerySet[Alert]:
    """Alerts with their node, event, people and deliveries (the alerts API)."""
    deliveries = Prefetch("deliveries", queryset=list_deliveries().order_by("created_at", "id"))
    related = ("node", "source_event", "acknowledged_by", "resolved_by")
    return Alert.objects.select_related(*related).prefetch_related(deliveries)


def list_stale_claims(claimed_before: datetime) -> list[AlertDelivery]:
    return list(AlertDelivery.objects.filter(state=DeliveryState.SENDING, claimed_at__lt=claimed_before))


def list_overdue_ids(due_before: datetime) -> list[int]:
    return list(
        AlertDelivery.objects.filter(state=DeliveryState.PENDING, next_attempt_at__lt=due_before).values_list(
            "pk", flat=True
        )
    )
