from __future__ import annotations

from django.apps import AppConfig


class SimulationsConfig(AppConfig):
    name = "controlplane.apps.simulations"
    label = "simulations"
    verbose_name = "What-if simulations"
