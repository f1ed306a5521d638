from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from controlplane.apps.incidents.choices import Action, AlertState, Detector, Severity


class FailureEvent(models.Model):
    """One detected failure with its raw evidence, its classification and the action taken."""

    report_id = models.UUIDField(
        default=uuid.uuid4, unique=True, help_text="Idempotency key: agents re-send reports by id."
    )
    detector = models.CharField(max_length=32, choices=Detector.choices)
    kind = models.CharField(max_length=64, help_text="What was detected, e.g. 'cuda_error', 'node_lost'.")
    summary = models.TextField(blank=True)
    node = models.ForeignKey(
        "fleet.Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="failure_events"
    )
    device = models.ForeignKey(
        "fleet.Device", null=True, blank=True, on_delete=models.SET_NULL, related_name="failure_events"
    )
    task = models.ForeignKey(
        "training.TrainingTask",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="failure_events",
    )
    evidence = models.JSONField(default=dict, blank=True)
    severity = models.CharField(max_length=8, choices=Severity.choices)
    action = models.CharField(max_length=32, choices=Action.choices, default=Action.NONE)
    occurred_at = models.DateTimeField()
    detected_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    escalated_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="escalations"
    )
    task_epoch = models.PositiveIntegerField(
        null=True, blank=True, help_text="The task epoch the evidence belongs to (fencing)."
    )
    handled_at = models.DateTimeField(null=True, blank=True)
    handling_claimed_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When a worker began handling it (released when its handling commits or defers).",
    )
    handled_by = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="absorbed",
        help_text="The event whose action handled this one (itself when it was acted on).",
    )
    transition = models.ForeignKey(
        "planning.Transition",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="failure_events",
        help_text="The transition that carried out the action.",
    )

    class Meta:
        ordering = ["-detected_at", "-id"]
        indexes = [
            models.Index(fields=["detected_at"], name="failure_detected_at"),
            models.Index(fields=["node", "detected_at"], name="failure_node_detected_at"),
            models.Index(fields=["device", "severity", "detected_at"], name="failure_device_sev_at"),
            models.Index(fields=["task", "handled_at"], name="failure_task_handled"),
        ]

    def __str__(self) -> str:
        return f"{self.severity} {self.kind} ({self.detector})"


class Alert(models.Model):
    """Something an operator should look at; acknowledged, then resolved, with comments."""

    severity = models.CharField(max_length=8, choices=Severity.choices)
    source_event = models.ForeignKey(
        FailureEvent, null=True, blank=True, on_delete=models.SET_NULL, related_name="alerts"
    )
    node = models.ForeignKey(
        "fleet.Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="alerts"
    )
    message = models.TextField()
    state = models.CharField(max_length=16, choices=AlertState.choices, default=AlertState.OPEN)
    created_at = models.DateTimeField(auto_now_add=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledge_comment = models.TextField(blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolve_comment = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state", "severity"], name="alert_state_severity")]

    def __str__(self) -> str:
        return f"{self.severity} {self.state}: {self.message[:40]}"
