from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from controlplane.apps.accounts.models import AuditEntry
from controlplane.apps.notifications.models import AlertDelivery, AlertRoute
from controlplane.apps.notifications.services import do_deliver_alert
from tests.notifications.conftest import SECRET, raise_alert, webhook_route
from tests.notifications.receivers import HttpReceiver


def test_an_admin_adds_a_route_and_reads_a_deliverys_attempts(
    admin_client: Any, make_receiver: Callable[..., HttpReceiver]
) -> None:
    receiver = make_receiver(script=[503, 200])
    added = admin_client.post(
        "/admin/notifications/alertroute/add/",
        {
            "name": "pager",
            "enabled": "on",
            "min_severity": "sev1",
            "severities": "",
            "kinds": "node_lost,cuda_error",
            "destination": "webhook",
            "url": receiver.url,
            "secret": SECRET,
        },
    )
    assert added.status_code == 302, added.content.decode()[:2000]
    route = AlertRoute.objects.get(name="pager")
    assert (route.min_severity, route.kinds, route.severities) == ("sev1", ["node_lost", "cuda_error"], [])

    delivery = AlertDelivery.objects.get(alert=raise_alert(kind="node_lost"))
    assert do_deliver_alert(delivery.pk).status == "retry"
    AlertDelivery.objects.filter(pk=delivery.pk).update(next_attempt_at=None)  # due now
    assert do_deliver_alert(delivery.pk).status == "sent"

    routes = admin_client.get("/admin/notifications/alertroute/").content.decode()
    deliveries = admin_client.get("/admin/notifications/alertdelivery/").content.decode()
    page = admin_client.get(f"/admin/notifications/alertdelivery/{delivery.pk}/change/").content.decode()
    assert "sev1" in routes
    assert "node_lost, cuda_error" in routes
    assert "pager" in deliveries
    assert "HTTP 503 Service Unavailable: ok" in page  # the first attempt's answer, in the attempts inline
    assert page.count("retry") >= 1
    assert page.count("sent") >= 1


def test_a_webhook_route_for_everything_is_listed_as_taking_every_severity(admin_client: Any) -> None:
    webhook_route("chat", "https://chat.example.org/hook")

    routes = admin_client.get("/admin/notifications/alertroute/").content.decode()

    assert "sev1, sev2, sev3" in routes
    assert "any" in routes


def test_route_edits_are_audited_without_the_secret_or_the_tokens_in_the_url(admin_client: Any) -> None:
    url = "https://hooks.example.org/services/T000/B000/tokentokentoken"
    fields = {"name": "chat", "enabled": "on", "destination": "webhook", "url": url, "secret": SECRET}
    admin_client.post(
        "/admin/notifications/alertroute/add/", {**fields, "min_severity": "", "severities": ""}
    )
    route = AlertRoute.objects.get(name="chat")
    admin_client.post(
        f"/admin/notifications/alertroute/{route.pk}/change/",
        {**fields, "url": url.replace("tokentokentoken", "rotatedtoken"), "min_severity": "sev2"},
    )

    entries = list(AuditEntry.objects.filter(object_type="notifications.alertroute").order_by("id"))
    assert [e.verb for e in entries] == ["admin_add", "admin_change"]
    trail = json.dumps([[e.before, e.after] for e in entries])
    assert SECRET not in trail
    assert "tokentokentoken" not in trail
    assert "rotatedtoken" not in trail
    assert entries[1].before["min_severity"] == ""
    assert entries[1].after["min_severity"] == "sev2"
    assert entries[1].before["url"].startswith("https://hooks.example.org/… (sha256 ")
    assert entries[1].before["url"] != entries[1].after["url"]
