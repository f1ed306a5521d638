from __future__ import annotations

from django.contrib import admin

from controlplane.apps.accounts.models import AuditEntry


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["at", "actor_label", "verb", "object_type", "object_id"]
    list_filter = ["verb", "object_type"]
    search_fields = ["actor_label", "object_id"]
    readonly_fields = ["actor", "actor_label", "verb", "object_type", "object_id", "before", "after", "at"]

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False
