from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class AuditEntryImmutable(RuntimeError):
    """An audit row was about to be changed or deleted: the trail is append-only."""


class AuditEntryQuerySet(models.QuerySet["AuditEntry"]):
    def update(self, **kwargs: Any) -> int:
        raise AuditEntryImmutable("audit entries are append-only: they cannot be updated")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AuditEntryImmutable("audit entries are append-only: they cannot be deleted")


class AuditEntry(models.Model):
    """Who changed what: one append-only row per operator action (weight edits, cancels, drains…),
    admin edit and login. ``save`` only inserts; updates and deletes raise ``AuditEntryImmutable``."""

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

    objects = AuditEntryQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id", "at"], name="audit_object_at")]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.actor_label} {self.verb} {self.object_type}:{self.object_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AuditEntryImmutable(f"audit entry {self.pk} is append-only: it cannot be updated")
        kwargs["force_insert"] = True
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AuditEntryImmutable(f"audit entry {self.pk} is append-only: it cannot be deleted")


class ApiToken(models.Model):
    """A user's REST API token (``Authorization: Token <key>``). Only the SHA-256 of the key is stored:
    the key is shown once, when it is issued or rotated. It expires at ``expires_at``."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    key_hash = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the key, hex.")
    prefix = models.CharField(max_length=16, help_text="The key's first characters, to recognise it.")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user_id})"
