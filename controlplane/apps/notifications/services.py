"""Notification services: create the deliveries of an alert event (deduplicated per alert, route and
event), deliver one (claimed by compare-and-swap, one attempt row each), and sweep what a lost message
or a stopped worker left behind.

Celery messages carry delivery ids only and are sent after the caller's transaction commits."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from controlplane.apps.common.broadcast import send_event_on_commit
from controlplane.apps.incidents.models import Alert
from controlplane.apps.notifications.choices import (
    DELIVERY_MACHINE,
    AttemptOutcome,
    DeliveryEvent,
    DeliveryState,
    DestinationKind,
)
from controlplane.apps.notifications.conf import DeliverySettings, delivery_settings
from controlplane.apps.notifications.models import AlertDelivery, AlertRoute, DeliveryAttempt
from controlplane.apps.notifications.payload import AlertNotification, alert_fields
from controlplane.apps.notifications.rules import Verdict, next_step
from controlplane.apps.notifications.selectors import (
    get_delivery_for_sending,
    get_firing_state,
    list_overdue_ids,
    list_routes_for_alert,
    list_routes_that_got_firing,
    list_stale_claims,
)
from controlplane.apps.notifications.senders import SendResult, send_apprise, send_webhook

log = logging.getLogger(__name__)

DELIVER_ALERT = "notifications.deliver_alert"
DUE_SLACK_S = 0.5
"""A message may run this much before its delivery's next attempt is due (clock granularity)."""
OVERDUE_AFTER_S = 60.0
"""The sweep re-enqueues a pending delivery this long past due: its message was lost (broker down)."""


# --- enqueue ---------------------------------------------------------------------------------------


def _send(delivery_id: int, countdown: float | None = None) -> None:
    from controlplane.config.celery import app  # lazy: importers of this module need no Celery

    try:
        app.send_task(DELIVER_ALERT, kwargs={"delivery_id": delivery_id}, countdown=countdown)
    except Exception:  # the broker is down: the sweep re-enqueues overdue deliveries from the rows
        log.warning("could not enqueue %s for delivery %s", DELIVER_ALERT, delivery_id, exc_info=True)


def request_delivery(delivery_id: int) -> None:
    """Enqueue ``notifications.deliver_alert`` once the current transaction commits."""
    transaction.on_commit(lambda: _send(delivery_id))


def delivery_payload(d: AlertDelivery) -> dict[str, Any]:
    return {
        "id": d.pk,
        "alert": d.alert_id,
        "route": d.route_name,
        "event": d.event,
        "state": d.state,
        "attempts": d.attempts,
        "last_error": d.last_error,
    }


def _create_deliveries(alert: Alert, routes: list[AlertRoute], event: DeliveryEvent) -> list[AlertDelivery]:
    created: list[AlertDelivery] = []
    for route in routes:
        delivery, new = AlertDelivery.objects.get_or_create(
            alert=alert,
            route=route,
            event=event,
            defaults={"route_name": route.name, "next_attempt_at": timezone.now()},
        )
        if new:  # an existing row means this event was already handed to this route: send nothing more
            created.append(delivery)
            request_delivery(delivery.pk)
            send_event_on_commit("alert.delivery", delivery_payload(delivery))
    return created


@transaction.atomic
def do_notify_alert_raised(alert: Alert) -> list[AlertDelivery]:
    """A firing delivery to every enabled route that takes the alert; none twice for the same alert."""
    return _create_deliveries(alert, list_routes_for_alert(alert), DeliveryEvent.FIRED)


@transaction.atomic
def do_notify_alert_resolved(alert: Alert) -> list[AlertDelivery]:
    """A resolution to the routes that got (or are still getting) the alert's firing."""
    return _create_deliveries(alert, list_routes_that_got_firing(alert), DeliveryEvent.RESOLVED)


def on_alert_raised(sender: object, alert: Alert, **_: object) -> None:
    """Receiver of :data:`controlplane.apps.incidents.signals.alert_raised`."""
    do_notify_alert_raised(alert)


def on_alert_resolved(sender: object, alert: Alert, **_: object) -> None:
    """Receiver of :data:`controlplane.apps.incidents.signals.alert_resolved`."""
    do_notify_alert_resolved(alert)


# --- deliver ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeliveryOutcome:
    status: Literal["sent", "retry", "failed", "waiting", "skipped"]
    detail: str = ""
    retry_in_s: float | None = None
    """Set when the delivery is to be tried again: run the task again after this many seconds."""


Sender = Callable[[AlertRoute, AlertNotification, DeliverySettings], SendResult]
SENDERS: dict[str, Sender] = {
    DestinationKind.WEBHOOK: lambda route, note, cfg: send_webhook(
        route.url, route.secret, note, cfg.http_timeout_s
    ),
    DestinationKind.APPRISE: lambda route, note, cfg: send_apprise(route.url, note),
}


def _fail_unsendable(delivery: AlertDelivery, reason: str) -> DeliveryOutcome:
    with transaction.atomic():
        DELIVERY_MACHINE.check(DeliveryState.PENDING, DeliveryState.FAILED)
        done = AlertDelivery.objects.filter(pk=delivery.pk, state=DeliveryState.PENDING).update(
            state=DeliveryState.FAILED, last_error=reason, failed_at=timezone.now(), updated_at=timezone.now()
        )
        if done:
            delivery.refresh_from_db()
            send_event_on_commit("alert.delivery", delivery_payload(delivery))
    return DeliveryOutcome("failed", reason) if done else DeliveryOutcome("skipped", "no longer pending")


def _postpone(delivery: AlertDelivery, wait_s: float, why: str) -> DeliveryOutcome:
    """Keep a pending delivery pending ``wait_s`` longer (it is not overdue meanwhile, so the sweep
    leaves it alone) and say when to look again."""
    due = timezone.now() + timedelta(seconds=wait_s)
    AlertDelivery.objects.filter(
        pk=delivery.pk, state=DeliveryState.PENDING, attempts=delivery.attempts
    ).update(next_attempt_at=due, updated_at=timezone.now())
    return DeliveryOutcome("waiting", why, retry_in_s=wait_s)


@dataclass(frozen=True)
class Refusal:
    """Why a delivery is not attempted now: ``skip`` it, ``fail`` it for good, ``wait`` ``wait_s`` more
    (postponing it), or look again ``later`` (in ``wait_s``, when it is due)."""

    action: Literal["skip", "fail", "wait", "later"]
    reason: str
    wait_s: float = 0.0


def check_deliverable(delivery: AlertDelivery, now: datetime, cfg: DeliverySettings) -> Refusal | None:
    """Why ``delivery`` is not to be attempted now, or None when it is (reads only)."""
    if delivery.state != DeliveryState.PENDING:
        return Refusal("skip", f"delivery is {delivery.state}")
    if delivery.route is None:
        return Refusal("fail", "the route was deleted before the delivery was made")
    if not delivery.route.enabled:
        return Refusal("fail", f"route {delivery.route.name} was disabled")
    if delivery.next_attempt_at is not None:
        early_s = (delivery.next_attempt_at - now).total_seconds()
        if early_s > DUE_SLACK_S:  # a duplicate message, early: look again when it is due
            return Refusal("later", "not due yet", wait_s=early_s)
    if delivery.event == DeliveryEvent.RESOLVED and get_firing_state(delivery) in (
        DeliveryState.PENDING,
        DeliveryState.SENDING,
    ):
        return Refusal("wait", "the firing is not delivered yet", wait_s=max(1.0, cfg.retry_base_s))
    return None


def _act_on(delivery: AlertDelivery, refusal: Refusal) -> DeliveryOutcome:
    if refusal.action == "fail":
        return _fail_unsendable(delivery, refusal.reason)
    if refusal.action == "wait":
        return _postpone(delivery, refusal.wait_s, refusal.reason)
    if refusal.action == "later":
        return DeliveryOutcome("waiting", refusal.reason, retry_in_s=refusal.wait_s)
    return DeliveryOutcome("skipped", refusal.reason)


def _claim(delivery: AlertDelivery, now: datetime) -> bool:
    """pending -> sending with the attempt counted, only if nobody else did it first."""
    DELIVERY_MACHINE.check(DeliveryState.PENDING, DeliveryState.SENDING)
    due = Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now + timedelta(seconds=DUE_SLACK_S))
    claimed = AlertDelivery.objects.filter(
        due, pk=delivery.pk, state=DeliveryState.PENDING, attempts=delivery.attempts
    ).update(state=DeliveryState.SENDING, attempts=delivery.attempts + 1, claimed_at=now, updated_at=now)
    return claimed == 1


def do_deliver_alert(delivery_id: int) -> DeliveryOutcome:
    """Make one attempt of a delivery and record it; the outcome says whether to run again and when."""
    cfg = delivery_settings()
    delivery = get_delivery_for_sending(delivery_id)
    if delivery is None:
        return DeliveryOutcome("skipped", f"no delivery {delivery_id}")
    started = timezone.now()
    refusal = check_deliverable(delivery, started, cfg)
    if refusal is not None:
        return _act_on(delivery, refusal)
    if not _claim(delivery, started):
        return DeliveryOutcome("skipped", "claimed by another worker")
    attempt = delivery.attempts + 1
    route = delivery.route
    assert route is not None  # check_deliverable
    note = AlertNotification(
        type="alert.fired" if delivery.event == DeliveryEvent.FIRED else "alert.resolved",
        delivery=delivery.pk,
        route=route.name,
        attempt=attempt,
        timestamp=int(time.time()),
        alert=alert_fields(delivery.alert),
    )
    result = SENDERS[route.destination](route, note, cfg)
    return _record_attempt(delivery, attempt, started, result, cfg)


def _record_attempt(
    delivery: AlertDelivery, attempt: int, started: datetime, result: SendResult, cfg: DeliverySettings
) -> DeliveryOutcome:
    step = next_step(result.verdict, attempt, cfg.max_attempts, cfg.retry_base_s, cfg.retry_max_s)
    finished = timezone.now()
    fields: dict[str, Any] = {"updated_at": finished, "claimed_at": None}
    if step.verdict is Verdict.SENT:
        new, outcome = DeliveryState.SENT, DeliveryOutcome("sent", f"after {attempt} attempt(s)")
        fields |= {"sent_at": finished, "next_attempt_at": None, "last_error": ""}
        attempt_outcome = AttemptOutcome.SENT
    elif step.verdict is Verdict.RETRY:
        assert step.retry_in_s is not None
        new = DeliveryState.PENDING
        outcome = DeliveryOutcome("retry", result.error, retry_in_s=step.retry_in_s)
        fields |= {
            "last_error": result.error,
            "next_attempt_at": finished + timedelta(seconds=step.retry_in_s),
        }
        attempt_outcome = AttemptOutcome.RETRY
    else:
        reason = result.error
        if result.verdict is Verdict.RETRY:  # transient, but this was the last attempt
            reason = f"gave up after {attempt} attempts; last: {result.error}"
        new, outcome = DeliveryState.FAILED, DeliveryOutcome("failed", reason)
        fields |= {"last_error": reason, "failed_at": finished, "next_attempt_at": None}
        attempt_outcome = AttemptOutcome.FAILED
    DELIVERY_MACHINE.check(DeliveryState.SENDING, new)
    with transaction.atomic():
        DeliveryAttempt.objects.create(
            delivery=delivery,
            number=attempt,
            started_at=started,
            finished_at=finished,
            outcome=attempt_outcome,
            status_code=result.status_code,
            error=result.error,
        )
        owned = AlertDelivery.objects.filter(pk=delivery.pk, state=DeliveryState.SENDING, attempts=attempt)
        if owned.update(state=new, **fields) != 1:  # the sweep released a claim it took for dead
            return DeliveryOutcome("skipped", f"attempt {attempt} finished after its claim was released")
        delivery.refresh_from_db()
        send_event_on_commit("alert.delivery", delivery_payload(delivery))
    return outcome


# --- sweep -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepResult:
    released: int
    enqueued: int


def do_sweep_deliveries(now: datetime | None = None) -> SweepResult:
    """Release claims of workers that stopped mid-attempt and re-enqueue deliveries long past due."""
    cfg = delivery_settings()
    now = now or timezone.now()
    released = 0
    for d in list_stale_claims(now - timedelta(seconds=cfg.claim_lease_s)):
        DELIVERY_MACHINE.check(DeliveryState.SENDING, DeliveryState.PENDING)
        released += AlertDelivery.objects.filter(
            pk=d.pk, state=DeliveryState.SENDING, claimed_at=d.claimed_at
        ).update(
            state=DeliveryState.PENDING,
            claimed_at=None,
            next_attempt_at=now,
            updated_at=now,
            last_error=f"attempt {d.attempts} was claimed at {d.claimed_at} by a worker that stopped "
            "before it finished",
        )
    overdue = list_overdue_ids(now - timedelta(seconds=OVERDUE_AFTER_S))
    for delivery_id in overdue:
        _send(delivery_id)
    return SweepResult(released, len(overdue))
