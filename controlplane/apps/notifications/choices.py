"""Route destinations, delivery events and the delivery state machine."""

from __future__ import annotations

from django.db import models

from controlplane.apps.common.statemachine import StateMachine


class DestinationKind(models.TextChoices):
    WEBHOOK = "webhook", "Signed JSON webhook"
    APPRISE = "apprise", "Apprise URL (chat, e-mail, ...)"


class DeliveryEvent(models.TextChoices):
    FIRED = "fired"
    RESOLVED = "resolved"


class DeliveryState(models.TextChoices):
    PENDING = "pending"  # waiting for its (next) attempt
    SENDING = "sending"  # claimed by one worker, attempt in flight
    SENT = "sent"
    FAILED = "failed"


class AttemptOutcome(models.TextChoices):
    SENT = "sent"
    RETRY = "retry"  # a transient failure: another attempt follows
    FAILED = "failed"  # a permanent failure, or the last attempt


D = DeliveryState
DELIVERY_MACHINE: StateMachine = StateMachine(
    "alert delivery",
    {
        D.PENDING: frozenset({D.SENDING, D.FAILED}),
        D.SENDING: frozenset({D.SENT, D.FAILED, D.PENDING}),
        D.SENT: frozenset(),
        D.FAILED: frozenset(),
    },
    terminal=frozenset({D.SENT, D.FAILED}),
)
