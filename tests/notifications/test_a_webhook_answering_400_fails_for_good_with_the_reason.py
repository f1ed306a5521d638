from __future__ import annotations

import time
from collections.abc import Callable

from controlplane.apps.notifications.models import AlertDelivery, DeliveryAttempt
from tests.notifications.conftest import WORKER_ENV, Worker, raise_alert, webhook_route
from tests.notifications.receivers import HttpReceiver, wait_for


def test_a_client_error_is_a_permanent_failure_and_is_not_retried(
    transactional_db: None, celery_worker: Worker, make_receiver: Callable[..., HttpReceiver]
) -> None:
    receiver = make_receiver(script=[400], answer="unknown field 'alert'")
    webhook_route("chat", receiver.url)

    alert = raise_alert()

    delivery = wait_for(
        "the delivery to fail",
        lambda: AlertDelivery.objects.filter(alert=alert, state="failed").first(),
        90,
    )
    assert delivery.attempts == 1
    assert "HTTP 400" in delivery.last_error
    assert "unknown field 'alert'" in delivery.last_error
    assert delivery.failed_at is not None
    [attempt] = DeliveryAttempt.objects.filter(delivery=delivery)
    assert (attempt.outcome, attempt.status_code) == ("failed", 400)
    # several backoff periods later there was still only the one request
    time.sleep(8 * float(WORKER_ENV["UNICRON_ALERT_RETRY_BASE_S"]))
    assert len(receiver.received()) == 1
    assert AlertDelivery.objects.get(pk=delivery.pk).attempts == 1
