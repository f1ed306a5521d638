from __future__ import annotations

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "controlplane.apps.accounts"
    label = "accounts"
    verbose_name = "Accounts, roles and audit"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from controlplane.apps.accounts import signals  # noqa: F401  (connects the login audit)
