from __future__ import annotations

import pytest

from controlplane.apps.notifications.models import AlertDelivery, AlertRoute, DeliveryAttempt
from controlplane.apps.notifications.services import do_deliver_alert
from tests.notifications.conftest import raise_alert, webhook_route
from tests.notifications.receivers import free_port


def test_a_refused_connection_is_retried_until_the_last_attempt_then_fails(
    db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UNICRON_ALERT_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("UNICRON_ALERT_RETRY_BASE_S", "0")
    webhook_route("pager", f"http://127.0.0.1:{free_port()}/hook")  # nobody listens there
    delivery = AlertDelivery.objects.get(alert=raise_alert())

    first = do_deliver_alert(delivery.pk)
    second = do_deliver_alert(delivery.pk)
    third = do_deliver_alert(delivery.pk)

    assert (first.status, first.retry_in_s) == ("retry", 0.0)
    assert "ConnectError" in first.detail
    assert second.status == "failed"
    assert second.detail.startswith("gave up after 2 attempts; last: ConnectError")
    assert third.status == "skipped"
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts) == ("failed", 2)
    assert delivery.last_error == second.detail
    outcomes = DeliveryAttempt.objects.filter(delivery=delivery).values_list("outcome", "status_code")
    assert list(outcomes) == [("retry", None), ("failed", None)]


def test_a_route_disabled_before_its_delivery_fails_it_without_sending(db: None) -> None:
    webhook_route("pager", f"http://127.0.0.1:{free_port()}/hook")
    delivery = AlertDelivery.objects.get(alert=raise_alert())
    AlertRoute.objects.filter(name="pager").update(enabled=False)

    outcome = do_deliver_alert(delivery.pk)

    delivery.refresh_from_db()
    assert (outcome.status, delivery.state, delivery.attempts) == ("failed", "failed", 0)
    assert delivery.last_error == "route pager was disabled"
    assert not DeliveryAttempt.objects.exists()


def test_a_disabled_route_gets_no_deliveries_at_all(db: None) -> None:
    AlertRoute.objects.create(
        name="pager", enabled=False, destination="webhook", url="https://x.example.org/", secret="s" * 16
    )

    raise_alert()

    assert not AlertDelivery.objects.exists()
