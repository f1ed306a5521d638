from __future__ import annotations

from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "controlplane.apps.fleet"
    label = "fleet"
    verbose_name = "Fleet: nodes, devices, agent commands"
    default_auto_field = "django.db.models.BigAutoField"
