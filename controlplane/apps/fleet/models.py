from __future__ import annotations

import uuid

from django.db import models

from controlplane.apps.fleet.choices import CommandState, CommandType, DeviceState, NodeState


class Node(models.Model):
    """A machine running one node agent. Its token is stored only as a SHA-256 hash."""

    name = models.SlugField(max_length=100, unique=True)
    address = models.CharField(max_length=255, blank=True)
    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.JOINING)
    quarantined = models.BooleanField(
        default=False, help_text="Kept out of plans until an operator clears it."
    )
    quarantine_reason = models.TextField(blank=True, help_text="Why the node was quarantined.")
    isolated_at = models.DateTimeField(null=True, blank=True, help_text="When the node was last isolated.")
    isolation_reason = models.TextField(blank=True, help_text="Why the node was last isolated.")
    probation_until = models.DateTimeField(
        null=True, blank=True, help_text="Back in service on probation until then (after an isolation)."
    )
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    agent_version = models.CharField(max_length=64, blank=True)
    snapshot_endpoint = models.CharField(
        max_length=255, blank=True, help_text="host:port where the agent serves in-memory snapshots."
    )
    snapshots = models.JSONField(
        default=list, blank=True, help_text="In-memory snapshots the agent holds (last hello/heartbeat)."
    )
    token_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        indexes = [models.Index(fields=["state"], name="node_state")]

    def __str__(self) -> str:
        return self.name


class Device(models.Model):
    """A GPU, or a CPU slot standing in for one."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="devices")
    index = models.PositiveIntegerField()
    kind = models.CharField(max_length=64, help_text="Device kind key, e.g. 'h100-80gb' or 'cpu'.")
    memory_bytes = models.BigIntegerField()
    state = models.CharField(max_length=16, choices=DeviceState.choices, default=DeviceState.HEALTHY)
    error_count = models.PositiveIntegerField(default=0)
    sev2_count = models.PositiveIntegerField(default=0)
    sev1_count = models.PositiveIntegerField(default=0)
    last_error_at = models.DateTimeField(null=True, blank=True)
    isolated_at = models.DateTimeField(null=True, blank=True, help_text="When the device was last isolated.")
    isolation_reason = models.TextField(blank=True, help_text="Why the device was last isolated.")
    probation_until = models.DateTimeField(
        null=True, blank=True, help_text="Back in service on probation until then (after an isolation)."
    )

    class Meta:
        ordering = ["node__name", "index"]
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="device_unique_index_per_node"),
            models.CheckConstraint(
                condition=models.Q(memory_bytes__gte=0), name="device_memory_non_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node_id}:{self.index}"


class AgentCommand(models.Model):
    """The outbox of commands to a node agent; re-sent until acknowledged, fenced by the task epoch."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="commands")
    command_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    type = models.CharField(max_length=32, choices=CommandType.choices)
    payload = models.JSONField(default=dict, blank=True)
    task = models.ForeignKey(
        "training.TrainingTask", null=True, blank=True, on_delete=models.SET_NULL, related_name="commands"
    )
    task_epoch = models.PositiveIntegerField(null=True, blank=True)
    transition = models.ForeignKey(
        "planning.Transition",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="commands",
        help_text="The transition this command carries out (its ack advances it).",
    )
    state = models.CharField(max_length=16, choices=CommandState.choices, default=CommandState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    acked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["node", "state", "created_at"], name="command_outbox")]

    def __str__(self) -> str:
        return f"{self.type} {self.command_id}"
