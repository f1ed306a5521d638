from __future__ import annotations

from django.apps import AppConfig


class TrainingConfig(AppConfig):
    name = "controlplane.apps.training"
    label = "training"
    verbose_name = "Training tasks and allocations"
    default_auto_field = "django.db.models.BigAutoField"
