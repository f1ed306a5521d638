"""The dashboard's alerts page lists each alert's deliveries (route, state, attempts, why) and updates
them live when a delivery changes (receivers and route helpers from tests/notifications)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from controlplane.apps.fleet.models import Node
from controlplane.apps.incidents.choices import Severity
from controlplane.apps.incidents.models import Alert
from controlplane.apps.incidents.services import do_raise_alert
from controlplane.apps.notifications.models import AlertDelivery
from controlplane.apps.notifications.services import do_deliver_alert
from tests.browser.conftest import assert_not_reloaded, mark_page, services
from tests.notifications.conftest import webhook_route
from tests.notifications.receivers import HttpReceiver


def raise_alert_held_back(node: Node) -> Alert:
    """Raise an alert whose deliveries are due only in an hour: a Celery worker running beside this test
    (tests/notifications start one) leaves them pending, so the page first shows them pending."""
    with transaction.atomic():
        alert = do_raise_alert(Severity.SEV1, "node node-c lost", node=node)
        AlertDelivery.objects.filter(alert=alert).update(next_attempt_at=timezone.now() + timedelta(hours=1))
    return alert


@pytest.fixture
def receivers() -> Iterator[tuple[HttpReceiver, HttpReceiver]]:
    pager, chat = HttpReceiver().start(), HttpReceiver(script=[403], answer="token revoked").start()
    yield pager, chat
    pager.stop()
    chat.stop()


def test_a_failed_delivery_appears_under_its_alert_with_the_reason_without_a_reload(
    cluster: Any, new_page: Any, live_url: str, receivers: tuple[HttpReceiver, HttpReceiver]
) -> None:
    pager, chat = receivers
    services(webhook_route, "pager", pager.url)
    services(webhook_route, "chat", chat.url)
    alert = services(raise_alert_held_back, cluster.nodes[2])
    page = new_page("operator")
    page.goto(f"{live_url}/alerts/")
    row = f"[data-alert='{alert.pk}']"
    page.wait_for_selector(f"{row} [data-testid=alert-delivery][data-route=chat][data-state=pending]")
    mark_page(page)

    AlertDelivery.objects.filter(alert=alert).update(next_attempt_at=timezone.now())
    for delivery in AlertDelivery.objects.filter(alert=alert):
        services(do_deliver_alert, delivery.pk)

    page.wait_for_selector(f"{row} [data-testid=alert-delivery][data-route=chat][data-state=failed]")
    page.wait_for_selector(f"{row} [data-testid=alert-delivery][data-route=pager][data-state=sent]")
    line = page.inner_text(f"{row} [data-testid=alert-deliveries]")
    assert "chat failed 1 attempt — HTTP 403 Forbidden: token revoked" in line
    assert "pager sent 1 attempt" in line
    assert_not_reloaded(page)
