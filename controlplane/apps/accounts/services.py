"""Account services: roles and the audit trail."""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import transaction

from controlplane.apps.accounts.models import AuditEntry
from controlplane.apps.accounts.roles import Role, ensure_role_groups

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
