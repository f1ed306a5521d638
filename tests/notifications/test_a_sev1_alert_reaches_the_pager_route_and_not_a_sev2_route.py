from __future__ import annotations

import json
import time
from collections.abc import Callable

from controlplane.apps.incidents.choices import Severity
from controlplane.apps.notifications.models import AlertDelivery
from tests.notifications.conftest import Worker, raise_alert, webhook_route
from tests.notifications.receivers import HttpReceiver, wait_for


def test_a_sev1_alert_reaches_the_pager_and_everything_routes_but_not_the_sev2_and_lower_one(
    transactional_db: None, celery_worker: Worker, make_receiver: Callable[..., HttpReceiver]
) -> None:
    pager, chat, low = make_receiver(), make_receiver(), make_receiver()
    webhook_route("pager", pager.url, min_severity="sev1")
    webhook_route("chat", chat.url)  # everything
    webhook_route("sev2-and-lower", low.url, severities=["sev2", "sev3"])
    raised = time.monotonic()

    alert = raise_alert(Severity.SEV1, message="node n3 lost")

    [to_pager] = wait_for("the pager webhook to be called", pager.received, 60)
    wait_for("the chat webhook to be called", chat.received, 60)
    wait_for(
        "both deliveries to be recorded as sent",
        lambda: AlertDelivery.objects.filter(alert=alert, state="sent").count() == 2,
        30,
    )
    assert json.loads(to_pager.body)["alert"]["message"] == "node n3 lost"
    assert to_pager.at - raised < 60, celery_worker.tail()
    assert low.received() == []
    assert sorted(AlertDelivery.objects.filter(alert=alert).values_list("route_name", flat=True)) == [
        "chat",
        "pager",
    ]


def test_a_sev3_alert_goes_to_the_sev2_and_lower_route_only_among_the_filtered_ones(
    transactional_db: None, celery_worker: Worker, make_receiver: Callable[..., HttpReceiver]
) -> None:
    pager, low = make_receiver(), make_receiver()
    webhook_route("pager", pager.url, min_severity="sev1")
    webhook_route("sev2-and-lower", low.url, severities=["sev2", "sev3"], kinds=["straggler"])

    raise_alert(Severity.SEV3, kind="cuda_error")  # not a kind the low route takes
    alert = raise_alert(Severity.SEV3, kind="straggler")

    [request] = wait_for("the sev2-and-lower webhook to be called", low.received, 60)
    assert json.loads(request.body)["alert"]["id"] == alert.pk
    assert pager.received() == []
    assert list(AlertDelivery.objects.values_list("route_name", "alert_id")) == [("sev2-and-lower", alert.pk)]
