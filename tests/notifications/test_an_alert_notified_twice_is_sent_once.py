from __future__ import annotations

import time
from collections.abc import Callable

from django.db import transaction

from controlplane.apps.notifications.models import AlertDelivery, DeliveryAttempt
from controlplane.apps.notifications.services import do_notify_alert_raised, request_delivery
from tests.notifications.conftest import Worker, raise_alert, webhook_route
from tests.notifications.receivers import HttpReceiver, wait_for


def test_a_second_notification_and_duplicate_messages_send_nothing_more(
    transactional_db: None, celery_worker: Worker, make_receiver: Callable[..., HttpReceiver]
) -> None:
    receiver = make_receiver()
    webhook_route("pager", receiver.url)

    with transaction.atomic():
        alert = raise_alert()
        again = do_notify_alert_raised(alert)  # the hook runs twice for the same alert
        delivery = AlertDelivery.objects.get(alert=alert)
        for _ in range(3):  # and the delivery's message arrives four times (redelivery), to two processes
            request_delivery(delivery.pk)

    assert again == []
    wait_for(
        "the delivery to be sent", lambda: AlertDelivery.objects.filter(pk=delivery.pk, state="sent").exists()
    )
    time.sleep(3.0)  # every duplicate message has had time to run
    assert len(receiver.received()) == 1, celery_worker.tail()
    assert AlertDelivery.objects.filter(alert=alert).count() == 1
    assert AlertDelivery.objects.get(pk=delivery.pk).attempts == 1
    assert DeliveryAttempt.objects.filter(delivery=delivery).count() == 1
