"""Demo accounts and schedule for `make demo`. Passwords are random per installation and kept in the
state directory so that a restarted demo prints the same ones."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path

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

    from controlplane.apps.accounts.services import do_rotate_api_token

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
        _, token = do_rotate_api_token(None, user)  # stored hashed: a fresh one each start, printed once
        accounts.append(DemoAccount(role=role, username=user.username, password=password, token=token))
    return accounts


@dataclass(frozen=True)
class DemoNode:
    name: str
    token_file: Path


def ensure_demo_nodes(count: int) -> list[DemoNode]:
    """Register ``demo-node-1..count`` (or give existing ones a fresh token) and write each token to a
    0600 file for its agent. Devices are filled in by each agent's Hello."""
    from controlplane.apps.fleet.models import Node
    from controlplane.apps.fleet.services import do_register_node, do_rotate_node_token

    tokens = state_dir() / "tokens"
    tokens.mkdir(mode=0o700, exist_ok=True)
    nodes = []
    for i in range(1, count + 1):
        name = f"demo-node-{i}"
        existing = Node.objects.filter(name=name).first()
        token = do_rotate_node_token(None, existing) if existing else do_register_node(None, name)[1]
        path = tokens / f"{name}.token"
        path.write_text(token)
        path.chmod(0o600)
        nodes.append(DemoNode(name, path))
    return nodes


def wait_for_healthy_nodes(names: list[str], timeout_s: float) -> int:
    """Wait until the named nodes report healthy over the agent link; return how many did."""
    from controlplane.apps.fleet.models import Node

    deadline = time.monotonic() + timeout_s
    healthy = 0
    while time.monotonic() < deadline:
        healthy = Node.objects.filter(name__in=names, state="healthy").count()
        if healthy == len(names):
            break
        time.sleep(0.25)
    return healthy


def ensure_demo_schedule() -> None:
    """Periodic control-plane tasks (heartbeat watchdog, transition timeouts) are registered by their apps;
    nothing extra is needed for the demo yet."""


__all__ = [
    "DemoAccount",
    "DemoNode",
    "asdict",
    "ensure_demo_accounts",
    "ensure_demo_nodes",
    "ensure_demo_schedule",
    "wait_for_healthy_nodes",
]
