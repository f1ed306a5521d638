"""Acknowledging an alert: with a comment, recorded against the operator, shown without reload."""

from __future__ import annotations

from typing import Any

from tests.browser.conftest import assert_not_reloaded, mark_page, services


def test_operator_acknowledges_and_resolves_alert(cluster: Any, new_page: Any, live_url: str) -> None:
    from controlplane.apps.incidents.choices import Severity
    from controlplane.apps.incidents.models import Alert
    from controlplane.apps.incidents.services import do_raise_alert

    alert = services(do_raise_alert, Severity.SEV2, "worker exited on node-b", node=cluster.nodes[1])
    page = new_page("operator")
    page.goto(f"{live_url}/alerts/")
    row = f"[data-alert='{alert.pk}']"
    page.wait_for_selector(f"{row}[data-state=open]")
    mark_page(page)

    page.click(f"{row} [data-testid=ack-alert]")
    page.fill("#confirm-comment", "looking into it")
    page.click("#confirm-ok")
    page.wait_for_selector(f"{row}[data-state=acknowledged]")
    alert.refresh_from_db()
    assert alert.state == "acknowledged"
    assert alert.acknowledged_by is not None
    assert alert.acknowledged_by.get_username() == "operator"
    assert alert.acknowledge_comment == "looking into it"

    # resolving needs a comment: an empty one is refused in the dialog
    page.click(f"{row} [data-testid=resolve-alert]")
    page.click("#confirm-ok")
    assert page.is_visible("#confirm-error")
    page.fill("#confirm-comment", "replaced the DIMM")
    page.click("#confirm-ok")
    page.wait_for_selector(row, state="detached")  # the default filter shows active alerts only
    assert Alert.objects.get(pk=alert.pk).resolve_comment == "replaced the DIMM"
    assert_not_reloaded(page)
