from __future__ import annotations

import json
from collections.abc import Callable

from django.utils import timezone

from controlplane.apps.accounts.roles import Role
from controlplane.apps.incidents.choices import Severity
from controlplane.apps.incidents.services import do_resolve_alert
from controlplane.apps.notifications.models import AlertDelivery
from controlplane.apps.notifications.services import do_deliver_alert
from tests.controlplane.conftest import make_user
from tests.notifications.conftest import Worker, raise_alert, webhook_route
from tests.notifications.receivers import HttpReceiver, wait_for


def test_resolving_an_alert_notifies_the_pager_that_was_paged_and_no_other_route(
    transactional_db: None, celery_worker: Worker, make_receiver: Callable[..., HttpReceiver]
) -> None:
    pager, low = make_receiver(), make_receiver()
    webhook_route("pager", pager.url, min_severity="sev1")
    webhook_route("sev2-and-lower", low.url, severities=["sev2", "sev3"])
    alert = raise_alert(Severity.SEV1)
    wait_for(
        "the firing to be sent", lambda: AlertDelivery.objects.filter(alert=alert, state="sent").exists()
    )

    do_resolve_alert(make_user(Role.OPERATOR), alert, "GPU swapped")

    wait_for(
        "the resolution to be sent",
        lambda: AlertDelivery.objects.filter(alert=alert, event="resolved", state="sent").exists(),
    )
    fired, resolved = (json.loads(r.body) for r in pager.received())
    assert (fired["type"], resolved["type"]) == ("alert.fired", "alert.resolved")
    assert resolved["alert"]["state"] == "resolved"
    assert resolved["alert"]["resolve_comment"] == "GPU swapped"
    assert resolved["alert"]["resolved_at"] is not None
    assert low.received() == []
    assert sorted(AlertDelivery.objects.filter(alert=alert).values_list("route_name", "event")) == [
        ("pager", "fired"),
        ("pager", "resolved"),
    ]


def test_a_resolution_waits_until_its_firing_is_delivered(
    db: None, make_receiver: Callable[..., HttpReceiver]
) -> None:
    pager = make_receiver()
    webhook_route("pager", pager.url)
    alert = raise_alert(Severity.SEV1)
    do_resolve_alert(make_user(Role.OPERATOR), alert, "false alarm")  # before the firing went out
    firing = AlertDelivery.objects.get(alert=alert, event="fired")
    resolution = AlertDelivery.objects.get(alert=alert, event="resolved")

    early = do_deliver_alert(resolution.pk)

    resolution.refresh_from_db()
    assert (early.status, early.detail) == ("waiting", "the firing is not delivered yet")
    assert early.retry_in_s is not None
    assert early.retry_in_s >= 1.0
    assert (resolution.state, resolution.attempts) == ("pending", 0)
    assert resolution.next_attempt_at is not None
    assert resolution.next_attempt_at > timezone.now()
    assert pager.received() == []

    assert do_deliver_alert(firing.pk).status == "sent"
    AlertDelivery.objects.filter(pk=resolution.pk).update(next_attempt_at=timezone.now())  # now due
    assert do_deliver_alert(resolution.pk).status == "sent"
    assert [json.loads(r.body)["type"] for r in pager.received()] == ["alert.fired", "alert.resolved"]
