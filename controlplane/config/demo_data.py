"""Demo accounts and schedule for `make demo`. Passwords are random per installation and kept in the
state directory so that a restarted demo prints the same ones."""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass

from controlplane.config.embedded import state_dir


@dataclass(frozen=True)
class DemoAccount:
    role: str
    username: str
    password: str
    token: str


def _credentials() -> dict[str, str]:
    path = state_dir() / "demo-credentials.json"
    if path.exists():
        stored: dict[str, str] = json.loads(path.read_text())
        return stored
    created = {role: secrets.token_urlsafe(9) for role in ("admin", "operator", "viewer")}
    path.write_text(json.dumps(created))
    path.chmod(0o600)
    return created


def ensure_demo_accounts() -> list[DemoAccount]:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from rest_framework.authtoken.models import Token

    passwords = _credentials()
    user_model = get_user_model()
    accounts = []
    for role, password in passwords.items():
        user, _ = user_model.objects.get_or_create(username=f"demo-{role}")
        user.set_password(password)
        if role == "admin":
            user.is_staff = True
            user.is_superuser = True
        user.save()
        user.groups.add(Group.objects.get_or_create(name=role)[0])  # roles are groups (accounts.roles)
        token, _ = Token.objects.get_or_create(user=user)
        accounts.append(DemoAccount(role=role, username=user.username, password=password, token=token.key))
    return accounts


def ensure_demo_schedule() -> None:
    """Periodic control-plane tasks (heartbeat watchdog, transition timeouts) are registered by their apps;
    nothing extra is needed for the demo yet."""


__all__ = ["DemoAccount", "asdict", "ensure_demo_accounts", "ensure_demo_schedule"]
