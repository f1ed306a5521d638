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

        from controlplane.apps.incidents.signals import alert_raised, alert_resolved
        from controlplane.apps.notifications.services import on_alert_raised, on_alert_resolved

        alert_raised.connect(on_alert_raised, dispatch_uid="notifications.alert_raised")
        alert_resolved.connect(on_alert_resolved, dispatch_uid="notifications.alert_resolved")
