from __future__ import annotations

from typing import Any

from rest_framework import serializers

from controlplane.apps.common.serializers import StrictInputSerializer
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
        ]


class NodeSerializer(serializers.ModelSerializer[Node]):
    device_count = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "address",
            "state",
            "quarantined",
            "last_heartbeat_at",
            "agent_version",
            "device_count",
            "created_at",
            "updated_at",
        ]

    def get_device_count(self, node: Node) -> int:
        """Annotated by ``selectors.list_nodes`` for lists; counted for a single node from a service."""
        annotated = getattr(node, "device_count", None)
        return int(annotated) if annotated is not None else node.devices.count()


class DeviceSpecSerializer(StrictInputSerializer):
    index = serializers.IntegerField(min_value=0)
    kind = serializers.CharField(max_length=64)
    memory_bytes = serializers.IntegerField(min_value=1)


class NodeRegisterSerializer(StrictInputSerializer):
    name = serializers.SlugField(max_length=100)
    address = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")
    devices = DeviceSpecSerializer(many=True, required=False, default=list)


class NodeRegisteredSerializer(serializers.Serializer[Any]):
    node = NodeSerializer()
    token = serializers.CharField(help_text="The agent token. Shown once; store it now.")


class InjectFaultSerializer(StrictInputSerializer):
    fault = serializers.ChoiceField(choices=list(FAULT_KINDS), help_text="What to inject.")
    task = serializers.IntegerField(
        min_value=1,
        required=False,
        allow_null=True,
        default=None,
        help_text="The running task to inject it into (not for node_loss).",
    )
    rank = serializers.IntegerField(
        min_value=0,
        required=False,
        allow_null=True,
        default=None,
        help_text="One of the task's ranks on this node; default: every rank of the task there.",
    )
    at_iteration = serializers.IntegerField(
        min_value=0, required=False, allow_null=True, default=None, help_text="Default: at once."
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
