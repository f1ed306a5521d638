from __future__ import annotations

import json
from collections.abc import Callable

from controlplane.apps.notifications.models import AlertDelivery, DeliveryAttempt
from controlplane.apps.notifications.signing import verify
from tests.notifications.conftest import SECRET, WORKER_ENV, Worker, raise_alert, webhook_route
from tests.notifications.receivers import HttpReceiver, wait_for


def test_two_server_errors_are_retried_with_growing_backoff_and_recorded(
    transactional_db: None, celery_worker: Worker, make_receiver: Callable[..., HttpReceiver]
) -> None:
    receiver = make_receiver(script=[500, 500, 200], answer="pager backend unavailable")
    webhook_route("pager", receiver.url)

    alert = raise_alert()

    delivery = wait_for(
        "the delivery to be sent",
        lambda: AlertDelivery.objects.filter(alert=alert, state="sent").first(),
        90,
    )
    requests = receiver.received()
    assert [r.status for r in requests] == [500, 500, 200], celery_worker.tail()
    assert delivery.attempts == 3
    assert delivery.sent_at is not None
    assert delivery.last_error == ""  # the delivery succeeded; the failures are in its attempts
    attempts = list(DeliveryAttempt.objects.filter(delivery=delivery).order_by("number"))
    assert [(a.number, a.outcome, a.status_code) for a in attempts] == [
        (1, "retry", 500),
        (2, "retry", 500),
        (3, "sent", 200),
    ]
    assert all("HTTP 500" in a.error and "pager backend unavailable" in a.error for a in attempts[:2])
    # exponential backoff: base, then twice the base (a loaded host only makes the gaps longer)
    base = float(WORKER_ENV["UNICRON_ALERT_RETRY_BASE_S"])
    first_gap, second_gap = requests[1].at - requests[0].at, requests[2].at - requests[1].at
    assert first_gap >= base * 0.9
    assert second_gap >= 2 * base * 0.9
    # every attempt is signed afresh (its body carries the attempt number and time)
    assert all(verify(r.body, SECRET, r.headers["X-Unicron-Signature"]) for r in requests)
    assert [json.loads(r.body)["attempt"] for r in requests] == [1, 2, 3]
    assert {r.headers["X-Unicron-Delivery"] for r in requests} == {str(delivery.pk)}
