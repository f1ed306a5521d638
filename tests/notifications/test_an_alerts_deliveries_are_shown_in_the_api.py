from __future__ import annotations

from collections.abc import Callable

from rest_framework.test import APIClient

from controlplane.apps.accounts.roles import Role
from controlplane.apps.notifications.models import AlertDelivery
from controlplane.apps.notifications.services import do_deliver_alert
from tests.controlplane.conftest import make_user
from tests.notifications.conftest import SECRET, raise_alert, webhook_route
from tests.notifications.receivers import HttpReceiver


def test_the_alert_lists_each_delivery_with_route_state_attempts_and_why(
    db: None, make_receiver: Callable[..., HttpReceiver]
) -> None:
    ok, broken = make_receiver(), make_receiver(script=[403], answer="token revoked")
    webhook_route("pager", ok.url)
    webhook_route("chat", broken.url)
    alert = raise_alert()
    for delivery in AlertDelivery.objects.filter(alert=alert):
        do_deliver_alert(delivery.pk)
    client = APIClient()
    client.force_authenticate(make_user(Role.VIEWER))

    detail = client.get(f"/api/v1/alerts/{alert.pk}/")
    listed = client.get("/api/v1/alerts/")

    assert detail.status_code == 200, detail.content
    deliveries = {d["route"]: d for d in detail.json()["deliveries"]}
    assert deliveries["pager"]["state"] == "sent"
    assert deliveries["pager"]["attempts"] == 1
    assert deliveries["chat"]["state"] == "failed"
    assert deliveries["chat"]["attempts"] == 1
    assert "HTTP 403" in deliveries["chat"]["last_error"]
    assert "token revoked" in deliveries["chat"]["last_error"]
    assert {d["event"] for d in deliveries.values()} == {"fired"}
    assert listed.json()["results"][0]["deliveries"] == detail.json()["deliveries"]
    assert SECRET not in detail.content.decode()  # routes are named, their secrets and URLs stay out
    assert ok.url not in detail.content.decode()
