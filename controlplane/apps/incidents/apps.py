from __future__ import annotations

from django.apps import AppConfig


class IncidentsConfig(AppConfig):
    name = "controlplane.apps.incidents"
    label = "incidents"
    verbose_name = "Incidents: failure events and alerts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from controlplane.apps.incidents.handling import on_transition_failed
        from controlplane.apps.planning.signals import transition_failed

        transition_failed.connect(on_transition_failed, dispatch_uid="incidents.escalate_failed_transition")
