from __future__ import annotations

from django.apps import AppConfig


class IncidentsConfig(AppConfig):
    name = "controlplane.apps.incidents"
    label = "incidents"
    verbose_name = "Incidents: failure events and alerts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from controlplane.apps.fleet.signals import agent_said_hello
        from controlplane.apps.incidents.reports import on_agent_said_hello

        agent_said_hello.connect(on_agent_said_hello, dispatch_uid="incidents.report_missing_workers")
