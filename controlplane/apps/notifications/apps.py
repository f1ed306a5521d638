from __future__ import annotations

from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "controlplane.apps.notifications"
    label = "notifications"
    verbose_name = "Notifications: alert routes and deliveries"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from controlplane.apps.notifications.conf import delivery_settings

        delivery_settings()  # a malformed UNICRON_ALERT_* variable stops start-up, naming it
