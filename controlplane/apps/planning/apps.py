from __future__ import annotations

from django.apps import AppConfig


class PlanningConfig(AppConfig):
    name = "controlplane.apps.planning"
    label = "planning"
    verbose_name = "Planning: plans and transitions"
    default_auto_field = "django.db.models.BigAutoField"
