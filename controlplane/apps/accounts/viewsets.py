"""A viewset base whose actions declare the least role they need (default: viewer)."""

from __future__ import annotations

from typing import ClassVar

from rest_framework import viewsets
from rest_framework.permissions import BasePermission

from controlplane.apps.accounts.permissions import ROLE_PERMISSIONS
from controlplane.apps.accounts.roles import Role


class RoleGatedViewSet(viewsets.GenericViewSet):  # type: ignore[type-arg]
    action_roles: ClassVar[dict[str, Role]] = {}

    def get_permissions(self) -> list[BasePermission]:
        role = self.action_roles.get(self.action or "", Role.VIEWER)
        return [ROLE_PERMISSIONS[role]()]
