from __future__ import annotations

from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import models

from controlplane.apps.incidents.choices import Severity
from controlplane.apps.notifications.choices import (
    AttemptOutcome,
    DeliveryEvent,
    DeliveryState,
    DestinationKind,
)
from controlplane.apps.notifications.rules import severities_matched, unknown_severities

MIN_SECRET_LENGTH = 16


def apprise_understands(url: str) -> bool:
    import apprise  # lazy: only routes of this kind need it

    return apprise.Apprise.instantiate(url, suppress_exceptions=True) is not None


class AlertRoute(models.Model):
    """Where alerts go: the alerts it takes (severity, kinds) and a destination (webhook or Apprise URL).

    Validated on every save (the admin, the shell or a fixture): a bad URL, an unknown severity or a
    webhook without a secret is refused with a message naming the field."""

    name = models.CharField(max_length=100, unique=True)
    enabled = models.BooleanField(default=True)
    min_severity = models.CharField(
        max_length=8,
        choices=Severity.choices,
        blank=True,
        default="",
        help_text="Only alerts at least this severe (sev1 is the most severe); blank: any severity.",
    )
    severities = ArrayField(
        models.CharField(max_length=8),
        blank=True,
        default=list,
        help_text="Only these severities, comma-separated (e.g. sev2,sev3); blank: any.",
    )
    kinds = ArrayField(
        models.CharField(max_length=64),
        blank=True,
        default=list,
        help_text="Only alerts whose failure event is of these kinds (e.g. node_lost,cuda_error); blank: any",
    )
    destination = models.CharField(max_length=16, choices=DestinationKind.choices)
    url = models.CharField(
        max_length=2000,
        help_text="webhook: the http(s) URL to POST to; apprise: any Apprise URL (slack://, mailto://, ...).",
    )
    secret = models.CharField(
        max_length=200,
        blank=True,
        help_text=f"webhook: the HMAC-SHA256 key of X-Unicron-Signature, {MIN_SECRET_LENGTH}+ characters",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.destination})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.full_clean(validate_unique=False, validate_constraints=False)
        super().save(*args, **kwargs)

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        self.kinds = [k.strip() for k in self.kinds if k.strip()]
        self.severities = [s.strip().lower() for s in self.severities if s.strip()]
        unknown = unknown_severities(self.severities)
        if unknown:
            errors.setdefault("severities", []).append(
                f"Unknown severity {', '.join(unknown)}: use sev1, sev2 or sev3."
            )
        elif unknown_severities([self.min_severity] if self.min_severity else []):
            pass  # the field's own validation names the unknown minimum
        elif not severities_matched(self.min_severity, self.severities):
            errors.setdefault("severities", []).append(
                f"Minimum severity {self.min_severity} and severities {','.join(self.severities)} "
                "together match no alert."
            )
        if self.destination == DestinationKind.WEBHOOK:
            try:
                URLValidator(schemes=["http", "https"])(self.url)
            except ValidationError:
                errors.setdefault("url", []).append(
                    f"A webhook URL must be http:// or https:// with a host, got {self.url!r}."
                )
            if len(self.secret) < MIN_SECRET_LENGTH:
                errors.setdefault("secret", []).append(
                    f"A webhook route needs a secret of at least {MIN_SECRET_LENGTH} characters "
                    "to sign its requests (X-Unicron-Signature)."
                )
        elif self.destination == DestinationKind.APPRISE and self.url and not apprise_understands(self.url):
            scheme = self.url.split("://", 1)[0] if "://" in self.url else self.url[:20]
            errors.setdefault("url", []).append(
                f"Apprise does not understand this URL (scheme {scheme!r}, or its arguments are incomplete)."
            )
        if errors:
            raise ValidationError(errors)


class AlertDelivery(models.Model):
    """One notification of one alert event (fired or resolved) to one route. Unique per (alert, route,
    event): raising the notification twice creates no second row, so nothing is sent twice."""

    alert = models.ForeignKey("incidents.Alert", on_delete=models.CASCADE, related_name="deliveries")
    route = models.ForeignKey(
        AlertRoute, null=True, blank=True, on_delete=models.SET_NULL, related_name="deliveries"
    )
    route_name = models.CharField(max_length=100, help_text="The route's name when the delivery was made.")
    event = models.CharField(max_length=16, choices=DeliveryEvent.choices)
    state = models.CharField(max_length=16, choices=DeliveryState.choices, default=DeliveryState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, help_text="Why the last attempt did not deliver.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    next_attempt_at = models.DateTimeField(
        null=True, blank=True, help_text="When a pending delivery is due (after a backoff)."
    )
    claimed_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["alert", "route", "event"], name="delivery_once_per_route_event")
        ]
        indexes = [models.Index(fields=["state", "next_attempt_at"], name="delivery_state_due")]
        verbose_name_plural = "alert deliveries"

    def __str__(self) -> str:
        return f"alert {self.alert_id} {self.event} to {self.route_name}: {self.state}"


class DeliveryAttempt(models.Model):
    """One try of a delivery, with what the destination answered: the history of a delivery is data."""

    delivery = models.ForeignKey(AlertDelivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=AttemptOutcome.choices)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [models.UniqueConstraint(fields=["delivery", "number"], name="attempt_number_once")]

    def __str__(self) -> str:
        return f"delivery {self.delivery_id} attempt {self.number}: {self.outcome}"
