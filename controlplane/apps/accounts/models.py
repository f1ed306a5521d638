from __future__ import annotations

from django.conf import settings
from django.db import models


class AuditEntry(models.Model):
    """Who changed what: one append-only row per operator action (weight edits, cancels, drains…)."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_label = models.CharField(max_length=150, blank=True, help_text="Username at the time, or 'system'.")
    verb = models.CharField(max_length=64)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=64)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id", "at"], name="audit_object_at")]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.actor_label} {self.verb} {self.object_type}:{self.object_id}"
