from __future__ import annotations

from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "controlplane.apps.fleet"
    label = "fleet"
    verbose_name = "Fleet: nodes, devices, agent commands"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from controlplane.apps.fleet.selectors import list_device_inventory
        from controlplane.apps.fleet.services import on_task_cancelled
        from controlplane.apps.training.fit import register_device_inventory
        from controlplane.apps.training.signals import task_cancelled

        register_device_inventory(list_device_inventory)  # the fit check of a submitted task
        task_cancelled.connect(on_task_cancelled, dispatch_uid="fleet.stop_cancelled_task")
