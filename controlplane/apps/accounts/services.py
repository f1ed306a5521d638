"""Account services: roles, API tokens and the audit trail."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone

from controlplane.apps.accounts.models import ApiToken, AuditEntry
from controlplane.apps.accounts.roles import Role, ensure_role_groups
from controlplane.apps.accounts.tokens import SHOWN_PREFIX_LENGTH, hash_api_token, new_api_token

Actor = AbstractBaseUser | AnonymousUser | None


def acting_user(actor: Actor) -> User | None:
    """The authenticated user behind ``actor``, or None for the system / anonymous."""
    if actor is None or not actor.is_authenticated:
        return None
    return cast(User, actor)


def do_record_audit(
    actor: Actor,
    verb: str,
    obj: Any,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> AuditEntry:
    """Append an audit row in the caller's transaction (call it from the service that made the change)."""
    user = acting_user(actor)
    return AuditEntry.objects.create(
        actor=user,
        actor_label=user.get_username() if user is not None else "system",
        verb=verb,
        object_type=type(obj)._meta.label_lower,
        object_id=str(obj.pk),
        before=before or {},
        after=after or {},
    )


@transaction.atomic
def do_set_user_role(actor: Actor, user: AbstractBaseUser, role: Role | None) -> None:
    """Give ``user`` exactly ``role`` (or none): one role group at a time."""
    groups = ensure_role_groups()
    before = sorted(user.groups.filter(name__in=[r.value for r in Role]).values_list("name", flat=True))  # type: ignore[attr-defined]
    user.groups.remove(*groups.values())  # type: ignore[attr-defined]
    if role is not None:
        user.groups.add(groups[role])  # type: ignore[attr-defined]
    do_record_audit(actor, "set_role", user, {"roles": before}, {"roles": [role.value] if role else []})


@transaction.atomic
def do_rotate_api_token(actor: Actor, user: User, ttl_days: int | None = None) -> tuple[ApiToken, str]:
    """Replace ``user``'s API tokens by a new one; returns it with its key (shown this once only: only
    its hash is stored). It expires after ``ttl_days`` (default ``UNICRON_API_TOKEN_TTL_DAYS``)."""
    days = ttl_days if ttl_days is not None else int(settings.UNICRON_API_TOKEN_TTL_DAYS)
    if days < 1:
        raise ValueError(f"ttl_days={days} must be at least 1")
    replaced = ApiToken.objects.filter(user=user).delete()[0]
    key = new_api_token()
    token = ApiToken.objects.create(
        user=user,
        key_hash=hash_api_token(key),
        prefix=key[:SHOWN_PREFIX_LENGTH],
        expires_at=timezone.now() + timedelta(days=days),
    )
    do_record_audit(
        actor,
        "rotate_api_token",
        user,
        {"tokens": replaced},
        {"prefix": token.prefix, "expires_at": token.expires_at.isoformat()},
    )
    return token, key


@transaction.atomic
def do_revoke_api_tokens(actor: Actor, user: User) -> int:
    """Delete every API token of ``user``; returns how many there were."""
    revoked = ApiToken.objects.filter(user=user).delete()[0]
    do_record_audit(actor, "revoke_api_tokens", user, {"tokens": revoked}, {"tokens": 0})
    return revoked


def client_address(request: HttpRequest | None) -> str:
    if request is None:
        return ""
    return str(request.META.get("REMOTE_ADDR", ""))[:64]


def do_record_login(
    request: HttpRequest | None, user: AbstractBaseUser | None, username: str, succeeded: bool
) -> AuditEntry:
    """One audit row per login attempt on any login path (dashboard, admin, browsable API)."""
    path = request.path[:200] if request is not None else ""
    return AuditEntry.objects.create(
        actor=cast(User, user) if succeeded and user is not None else None,
        actor_label=username[:150] if succeeded else "anonymous",
        verb="login" if succeeded else "login_failed",
        object_type="auth.user",
        object_id=str(user.pk) if succeeded and user is not None else username[:64],
        after={"username": username[:150], "address": client_address(request), "path": path},
    )
