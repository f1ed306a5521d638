from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.apps.common.serializers import StrictInputSerializer
from controlplane.apps.fleet import last_seen
from controlplane.apps.fleet.models import AgentCommand, Device, Node
from controlplane.apps.fleet.services import FAULT_KINDS


class DeviceSerializer(serializers.ModelSerializer[Device]):
    node_name = serializers.CharField(source="node.name", read_only=True)

    class Meta:
        model = Device
        fields = [
            "id",
            "node",
            "node_name",
            "index",
            "kind",
            "memory_bytes",
            "state",
            "error_count",
            "sev2_count",
            "sev1_count",
            "last_error_at",
            "isolated_at",
            "isolation_reason",
            "probation_until",
        ]


class NodeListSerializer(serializers.ListSerializer[Node]):
    """Reads the listed nodes' heartbeat times from Redis in one round trip."""

    def to_representation(self, data: Any) -> list[Any]:
        nodes = list(data.all() if hasattr(data, "all") else data)
        self.context["last_seen"] = last_seen.last_seen_or_none(n.pk for n in nodes) or {}
        return super().to_representation(nodes)


class NodeSerializer(serializers.ModelSerializer[Node]):
    device_count = serializers.SerializerMethodField()
    last_heartbeat_at = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "address",
            "state",
            "quarantined",
            "quarantine_reason",
            "isolated_at",
            "isolation_reason",
            "probation_until",
            "last_heartbeat_at",
            "agent_version",
            "device_count",
            "created_at",
            "updated_at",
        ]
        list_serializer_class = NodeListSerializer

    @extend_schema_field(OpenApiTypes.DATETIME)
    def get_last_heartbeat_at(self, node: Node) -> str | None:
        """The newest heartbeat: kept in Redis (``fleet.last_seen``); the row's stamp is written when the
        node's state changes, and read when Redis cannot be."""
        known = self.context.get("last_seen")
        heard = (known if known is not None else last_seen.last_seen_or_none([node.pk]) or {}).get(node.pk)
        stamps = [t for t in (node.last_heartbeat_at, heard and datetime.fromtimestamp(heard, tz=UTC)) if t]
        return max(stamps).isoformat().replace("+00:00", "Z") if stamps else None

    def get_device_count(self, node: Node) -> int:
        """Annotated by ``selectors.list_nodes`` for lists; counted for a single node from a service."""
        annotated = getattr(node, "device_count", None)
        return int(annotated) if annotated is not None else node.devices.count()


MAX_DEVICE_INDEX = 2**31 - 1
"""``Device.index`` is a PostgreSQL integer (PositiveIntegerField)."""
MAX_DEVICE_MEMORY_BYTES = 2**63 - 1
"""``Device.memory_bytes`` is a PostgreSQL bigint."""
MAX_DEVICES_PER_NODE = 1024


class DeviceSpecSerializer(StrictInputSerializer):
    index = serializers.IntegerField(min_value=0, max_value=MAX_DEVICE_INDEX)
    kind = serializers.CharField(max_length=64)
    memory_bytes = serializers.IntegerField(min_value=1, max_value=MAX_DEVICE_MEMORY_BYTES)


class NodeRegisterSerializer(StrictInputSerializer):
    name = serializers.SlugField(max_length=100)
    address = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")
    devices = DeviceSpecSerializer(many=True, required=False, default=list)

    def validate_devices(self, devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if len(devices) > MAX_DEVICES_PER_NODE:
            raise serializers.ValidationError(f"At most {MAX_DEVICES_PER_NODE} devices per node.")
        indexes = [device["index"] for device in devices]
        duplicates = sorted({i for i in indexes if indexes.count(i) > 1})
        if duplicates:
            raise serializers.ValidationError(f"Device indexes must be unique; repeated: {duplicates}.")
        return devices


class NodeRegisteredSerializer(serializers.Serializer[Any]):
    node = NodeSerializer()
    token = serializers.CharField(help_text="The agent token. Shown once; store it now.")


class InjectFaultSerializer(StrictInputSerializer):
    fault = serializers.ChoiceField(choices=list(FAULT_KINDS), help_text="What to inject.")
    task = serializers.IntegerField(
        min_value=1,
        max_value=2**63 - 1,
        required=False,
        allow_null=True,
        default=None,
        help_text="The running task to inject it into (not for node_loss).",
    )
    rank = serializers.IntegerField(
        min_value=0,
        max_value=2**31 - 1,
        required=False,
        allow_null=True,
        default=None,
        help_text="One of the task's ranks on this node; default: every rank of the task there.",
    )
    at_iteration = serializers.IntegerField(
        min_value=0,
        max_value=2**63 - 1,
        required=False,
        allow_null=True,
        default=None,
        help_text="Default: at once.",
    )
    slowdown = serializers.FloatField(
        min_value=1.0,
        max_value=100.0,
        required=False,
        allow_null=True,
        default=None,
        help_text="Straggler only: compute-time multiplier (default 3).",
    )
    message = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")


class InjectedFaultSerializer(serializers.ModelSerializer[AgentCommand]):
    node = serializers.CharField(source="node.name", read_only=True)

    class Meta:
        model = AgentCommand
        fields = ["command_id", "node", "type", "task", "task_epoch", "payload", "state", "created_at"]
