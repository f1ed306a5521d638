from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.http import HttpRequest, HttpResponse

from controlplane.apps.accounts.audited_admin import AuditedModelAdmin
from controlplane.apps.accounts.models import ApiToken, AuditEntry
from controlplane.apps.accounts.services import do_record_audit


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """The trail is append-only: readable here, never added, changed or deleted."""

    list_display = ["at", "actor_label", "verb", "object_type", "object_id"]
    list_filter = ["verb", "object_type"]
    search_fields = ["actor_label", "object_id"]
    readonly_fields = ["actor", "actor_label", "verb", "object_type", "object_id", "before", "after", "at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ApiToken)
class ApiTokenAdmin(AuditedModelAdmin):
    """API tokens can be looked at and revoked (deleted) here; they are issued by
    ``manage.py issue_api_token`` or ``POST /api/v1/me/token/`` (the key is never stored)."""

    list_display = ["prefix", "user", "created_at", "expires_at", "last_used_at"]
    search_fields = ["user__username", "prefix"]
    readonly_fields = ["user", "prefix", "created_at", "expires_at", "last_used_at"]
    exclude = ["key_hash"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


admin.site.unregister(User)
admin.site.unregister(Group)


@admin.register(User)
class AuditedUserAdmin(AuditedModelAdmin, UserAdmin):  # type: ignore[type-arg]
    """Users (and their role groups) changed in the admin leave audit rows; passwords never do (a
    password set in the admin is recorded as such, without any hash)."""

    def user_change_password(self, request: HttpRequest, id: str, form_url: str = "") -> HttpResponse:
        response = super().user_change_password(request, id, form_url)
        if request.method == "POST" and response.status_code == 302:
            user = User.objects.filter(pk=id).first()
            if user is not None:
                do_record_audit(request.user, "admin_set_password", user, {}, {"password": "set"})
        return response


@admin.register(Group)
class AuditedGroupAdmin(AuditedModelAdmin, GroupAdmin):
    pass
