"""Every login attempt, on every login path, becomes an audit row (success and failure)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest

from controlplane.apps.accounts.services import do_record_login


@receiver(user_logged_in, dispatch_uid="accounts.audit_login")
def audit_login(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    do_record_login(request, user, user.get_username(), succeeded=True)


@receiver(user_login_failed, dispatch_uid="accounts.audit_login_failed")
def audit_login_failed(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
) -> None:
    username = credentials.get(get_user_model().USERNAME_FIELD) or credentials.get("username") or ""
    do_record_login(request, None, str(username), succeeded=False)
