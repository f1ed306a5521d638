"""Overview: the WAF chart plots the sampler's achieved and optimum series, a new tick is appended live
(waf.sample) and the headline figures come from the summary endpoint."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from playwright.sync_api import expect

from tests.browser.conftest import assert_not_reloaded, mark_page, services


def _rates(cluster: Any, scale: float) -> None:
    from django.utils import timezone

    from controlplane.apps.metrics.choices import MetricKind
    from controlplane.apps.metrics.services import Sample, do_record_samples

    now = timezone.now()
    do_record_samples(
        Sample(MetricKind.ACHIEVED_FLOPS, scale * (i + 1) * 1e14, now - timedelta(seconds=1), t.pk)
        for i, t in enumerate(cluster.tasks)
    )


def test_sampled_waf_series_are_plotted_and_updated_live(cluster: Any, new_page: Any, live_url: str) -> None:
    from controlplane.apps.metrics.tasks import sample_cluster_waf_now

    services(_rates, cluster, 1.0)
    first = services(sample_cluster_waf_now)
    assert 0 < first.achieved <= first.optimum
    page = new_page("operator")
    chart = "[data-testid=waf-chart] .chart"
    page.wait_for_selector(f"{chart}[data-values='1,1']")  # both series have the sampled point
    page.wait_for_selector("#figures[data-loaded=true]")
    assert page.text_content("#fig-waf") != "—"
    assert "of optimum" in page.text_content("#fig-waf-share")
    mark_page(page)

    services(_rates, cluster, 0.5)  # half the speed: the window's mean rate is 3/4 of the first
    second = services(sample_cluster_waf_now)
    assert abs(second.achieved - 0.75 * first.achieved) < 1e-6 * first.achieved

    page.wait_for_selector(f"{chart}[data-values='2,2']")  # appended from the waf.sample event
    share = f"{100 * second.achieved / second.optimum:.1f} %"
    expect(page.locator("#fig-waf-share")).to_have_text(
        re.compile("^" + re.escape(share))
    )  # the CSP refuses eval
    assert_not_reloaded(page)
