"""Roles are Django groups: viewer < operator < admin. Staff and superusers count as admin."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group
from django.db import models


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer"
    OPERATOR = "operator", "Operator"
    ADMIN = "admin", "Admin"


RANK: dict[str, int] = {Role.VIEWER: 1, Role.OPERATOR: 2, Role.ADMIN: 3}


def get_user_role(user: AbstractBaseUser | AnonymousUser | None) -> Role | None:
    """The highest role a user holds, or None (anonymous, inactive, or no role)."""
    if user is None or not user.is_authenticated or not user.is_active:
        return None
    if getattr(user, "is_superuser", False) or getattr(user, "is_staff", False):
        return Role.ADMIN
    groups = getattr(user, "groups", None)  # PermissionsMixin; custom user models may lack it
    names = set(groups.values_list("name", flat=True)) if groups is not None else set()
    held = [Role(name) for name in names if name in RANK]
    return max(held, key=lambda r: RANK[r]) if held else None


def has_role(user: AbstractBaseUser | AnonymousUser | None, minimum: Role) -> bool:
    role = get_user_role(user)
    return role is not None and RANK[role] >= RANK[minimum]


def ensure_role_groups() -> dict[Role, Group]:
    return {role: Group.objects.get_or_create(name=role.value)[0] for role in Role}
