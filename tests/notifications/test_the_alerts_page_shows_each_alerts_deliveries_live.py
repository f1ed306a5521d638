"""The dashboard's alerts page lists each alert's deliveries (route, state, attempts, why) and updates
them live when a delivery changes (headless Chromium against a real daphne, as tests/browser)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controlplane.apps.incidents.choices import Severity
from controlplane.apps.incidents.services import do_raise_alert
from controlplane.apps.notifications.models import AlertDelivery
from controlplane.apps.notifications.services import do_deliver_alert
from tests.browser.conftest import (  # noqa: F401 - the browser tests' fixtures
    CHROMIUM,
    assert_not_reloaded,
    browser,
    cluster,
    live_url,
    mark_page,
    new_page,
    services,
)
from tests.notifications.conftest import webhook_route
from tests.notifications.receivers import HttpReceiver

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed"),
]


def test_a_failed_delivery_appears_under_its_alert_with_the_reason_without_a_reload(
    cluster: Any,  # noqa: F811
    new_page: Any,  # noqa: F811
    live_url: str,  # noqa: F811
    make_receiver: Callable[..., HttpReceiver],
) -> None:
    pager, chat = make_receiver(), make_receiver(script=[403], answer="token revoked")
    services(webhook_route, "pager", pager.url)
    services(webhook_route, "chat", chat.url)
    alert = services(do_raise_alert, Severity.SEV1, "node node-c lost", node=cluster.nodes[2])
    page = new_page("operator")
    page.goto(f"{live_url}/alerts/")
    row = f"[data-alert='{alert.pk}']"
    page.wait_for_selector(f"{row} [data-testid=alert-delivery][data-route=chat][data-state=pending]")
    mark_page(page)

    for delivery in AlertDelivery.objects.filter(alert=alert):
        services(do_deliver_alert, delivery.pk)

    page.wait_for_selector(f"{row} [data-testid=alert-delivery][data-route=chat][data-state=failed]")
    page.wait_for_selector(f"{row} [data-testid=alert-delivery][data-route=pager][data-state=sent]")
    line = page.inner_text(f"{row} [data-testid=alert-deliveries]")
    assert "chat failed 1 attempt — HTTP 403 Forbidden: token revoked" in line
    assert "pager sent 1 attempt" in line
    assert_not_reloaded(page)
