"""DRF permissions for the human API. Node agents never pass these: they are not users."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from controlplane.apps.accounts.roles import Role, has_role


class _HasRole(BasePermission):
    minimum: Role = Role.VIEWER
    message = "Your role does not allow this action."

    def has_permission(self, request: Request, view: Any) -> bool:
        return has_role(request.user, self.minimum)


class IsViewer(_HasRole):
    """Any authenticated, active human user with a role (or staff)."""

    minimum = Role.VIEWER


class IsOperator(_HasRole):
    minimum = Role.OPERATOR


class IsAdmin(_HasRole):
    minimum = Role.ADMIN


ROLE_PERMISSIONS: dict[Role, type[BasePermission]] = {
    Role.VIEWER: IsViewer,
    Role.OPERATOR: IsOperator,
    Role.ADMIN: IsAdmin,
}
