from __future__ import annotations

from django.apps import AppConfig


class PlanningConfig(AppConfig):
    name = "controlplane.apps.planning"
    label = "planning"
    verbose_name = "Planning: plans and transitions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from controlplane.apps.planning.handling import on_transition_failed
        from controlplane.apps.planning.signals import transition_failed

        transition_failed.connect(on_transition_failed, dispatch_uid="incidents.escalate_failed_transition")
