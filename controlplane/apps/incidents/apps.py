from __future__ import annotations

from django.apps import AppConfig


class IncidentsConfig(AppConfig):
    name = "controlplane.apps.incidents"
    label = "incidents"
    verbose_name = "Incidents: failure events and alerts"
    default_auto_field = "django.db.models.BigAutoField"
