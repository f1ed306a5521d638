"""A viewer sees the data but no operator controls, and the API refuses the actions anyway."""

from __future__ import annotations

from typing import Any

from tests.browser.conftest import services

POST = """async ([url]) => {
  const token = document.querySelector('meta[name=csrf-token]').content;
  const headers = {'X-CSRFToken': token, 'Content-Type': 'application/json'};
  const r = await fetch(url, {method: 'POST', headers, body: '{}', credentials: 'same-origin'});
  return r.status;
}"""


def test_viewer_sees_no_operator_actions_and_api_refuses(cluster: Any, new_page: Any, live_url: str) -> None:
    from controlplane.apps.incidents.choices import Severity
    from controlplane.apps.incidents.services import do_raise_alert

    alert = services(do_raise_alert, Severity.SEV2, "worker exited on node-b", node=cluster.nodes[1])
    page = new_page("viewer")
    assert page.text_content("[data-testid=role]") == "viewer"

    page.goto(f"{live_url}/tasks/")
    page.wait_for_selector("[data-testid=task-row]")
    assert (
        page.locator(
            "[data-testid=show-submit], [data-testid=cancel-task], [data-testid=change-weight]"
        ).count()
        == 0
    )

    page.goto(f"{live_url}/alerts/")
    page.wait_for_selector(f"[data-alert='{alert.pk}']")
    assert page.locator("[data-testid=ack-alert], [data-testid=resolve-alert]").count() == 0
    assert page.is_visible("[data-testid=viewer-note]")

    page.goto(f"{live_url}/nodes/")
    page.wait_for_selector("[data-testid=node-row]")
    assert page.locator("[data-testid=drain-node], [data-testid=inject-fault]").count() == 0

    task_id = cluster.tasks[0].pk
    node_id = cluster.nodes[0].pk
    for url in [
        f"/api/v1/alerts/{alert.pk}/acknowledge/",
        f"/api/v1/tasks/{task_id}/cancel/",
        f"/api/v1/nodes/{node_id}/drain/",
        "/api/v1/tasks/",
    ]:
        assert page.evaluate(POST, [url]) == 403, url
    alert.refresh_from_db()
    assert alert.state == "open"
