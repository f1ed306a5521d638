"""A fault shows up live: alert notification, grid and WAF chart update without a reload.

The self-healing loop is not wired yet, so the test drives the same services the loop will call
(failure event, alert, node state, metric samples); each emits its live event after commit.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from playwright.sync_api import expect

from tests.browser.conftest import assert_not_reloaded, mark_page, services


def test_fault_updates_alert_grid_and_waf_chart_live(cluster: Any, new_page: Any, live_url: str) -> None:
    from django.utils import timezone

    from controlplane.apps.fleet.choices import NodeState
    from controlplane.apps.fleet.services import do_set_node_state
    from controlplane.apps.incidents.choices import Action, Detector, Severity
    from controlplane.apps.incidents.services import FailureReport, do_raise_alert, do_record_failure_event
    from controlplane.apps.metrics.choices import MetricKind
    from controlplane.apps.metrics.services import Sample, do_record_samples

    now = timezone.now()
    services(
        do_record_samples,
        [Sample(MetricKind.CLUSTER_WAF, 5.6e15, now - timedelta(seconds=60 - i)) for i in range(0, 60, 10)]
        + [Sample(MetricKind.OPTIMAL_WAF, 6.1e15, now - timedelta(seconds=60 - i)) for i in range(0, 60, 10)],
    )
    page = new_page("operator")
    chart = "[data-testid=waf-chart] .chart"
    # a locator wait, not wait_for_function: a JavaScript string needs 'unsafe-eval', which the CSP refuses
    expect(page.locator(chart)).to_have_attribute("data-points", re.compile(r"^[1-9][0-9]*$"))
    points = int(page.get_attribute(chart, "data-points"))
    page.wait_for_selector("[data-node='node-c'][data-health='healthy']")
    mark_page(page)
    node = cluster.nodes[2]

    event, _ = services(
        do_record_failure_event,
        FailureReport(
            Detector.NODE_HEALTH,
            "node_lost",
            Severity.SEV1,
            timezone.now() - timedelta(seconds=2),
            Action.ISOLATE_AND_REPLAN,
            "node-c missed 3 heartbeats",
            {"missed_heartbeats": 3},
            node=node,
        ),
    )
    services(do_raise_alert, Severity.SEV1, "node-c lost: isolating and re-planning", event)
    services(do_set_node_state, node, NodeState.LOST, "missed heartbeats")
    # one timestamp for both kinds: two now() calls can straddle a millisecond, and the chart then
    # appends two points where the assertion below expects one
    at = timezone.now()
    services(
        do_record_samples,
        [Sample(MetricKind.CLUSTER_WAF, 2.1e15, at), Sample(MetricKind.OPTIMAL_WAF, 6.1e15, at)],
    )

    toast = page.wait_for_selector("[data-testid=alert-toast]")
    assert "node-c lost" in toast.text_content()
    # the badge is re-read from the API when the event arrives (a request the toast does not wait for)
    expect(page.locator("#nav-alert-count")).to_have_text("1")
    page.wait_for_selector("[data-node='node-c'][data-health='lost']")
    assert page.locator("[data-node='node-a'][data-health='healthy']").count() == 8
    page.wait_for_selector(f"{chart}[data-points='{points + 1}']")  # appended from the live event
    page.wait_for_selector(f"{chart}[data-markers='1']")  # the failure marker
    page.wait_for_selector("[data-testid=recent-failures]:has-text('node_lost')")
    assert page.text_content("#fig-waf") == "2.1 PFLOP/s"
    assert_not_reloaded(page)
