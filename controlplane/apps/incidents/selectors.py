"""Incident queries."""

from __future__ import annotations

from django.db.models import QuerySet

from controlplane.apps.incidents.models import Alert, FailureEvent


def list_failure_events() -> QuerySet[FailureEvent]:
    return FailureEvent.objects.select_related("node", "device", "task")


def list_alerts() -> QuerySet[Alert]:
    return Alert.objects.select_related("node", "source_event", "acknowledged_by", "resolved_by")
