from __future__ import annotations

from django.contrib import admin

from controlplane.apps.accounts.audited_admin import AuditedModelAdmin
from controlplane.apps.fleet.models import AgentCommand, Device, Node

DEVICE_SERVICE_FIELDS = ["state", "isolated_at", "isolation_reason", "probation_until"]
"""Written by fleet.services only (one write path): read-only in the admin."""


class DeviceInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Device
    extra = 0
    readonly_fields = DEVICE_SERVICE_FIELDS


@admin.register(Node)
class NodeAdmin(AuditedModelAdmin):
    list_display = ["name", "address", "state", "quarantined", "last_heartbeat_at", "agent_version"]
    list_filter = ["state", "quarantined"]
    search_fields = ["name", "address"]
    # state changes go through fleet.services (one write path), so they are read-only here
    readonly_fields = [
        "state",
        "quarantined",
        "quarantine_reason",
        "isolated_at",
        "isolation_reason",
        "probation_until",
        "token_hash",
        "created_at",
        "updated_at",
    ]
    inlines = [DeviceInline]


@admin.register(Device)
class DeviceAdmin(AuditedModelAdmin):
    list_display = ["node", "index", "kind", "memory_bytes", "state", "error_count", "probation_until"]
    list_filter = ["state", "kind"]
    readonly_fields = DEVICE_SERVICE_FIELDS


@admin.register(AgentCommand)
class AgentCommandAdmin(AuditedModelAdmin):
    list_display = ["command_id", "node", "type", "state", "task", "task_epoch", "created_at", "acked_at"]
    list_filter = ["state", "type"]
    readonly_fields = ["command_id", "state", "created_at", "sent_at", "acked_at"]
