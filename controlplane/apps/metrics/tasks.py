"""The cluster WAF timeline: Celery beat runs ``metrics.sample_cluster_waf`` every
:data:`SAMPLE_INTERVAL_S` seconds (schedule created by migration 0003).

Each tick writes three cluster samples through ``services.do_record_cluster_waf`` (which sends
``waf.sample`` to the dashboards after commit):

- ``cluster_waf``: Σ w(t) x measured achieved FLOP/s of the running tasks (selectors.get_achieved_waf);
- ``optimal_waf``: the healthy-cluster optimum (optimum.get_healthy_cluster_optimum);
- ``goodput``: the share of scheduled task time spent in useful iterations over the last
  :data:`GOODPUT_WINDOW_S` (selectors.get_goodput), when any task was scheduled.

No run row per tick (STYLE §5, as fleet.check_node_health): the samples are the record.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from celery import shared_task
from django.utils import timezone

from controlplane.apps.metrics.optimum import get_healthy_cluster_optimum
from controlplane.apps.metrics.selectors import get_achieved_waf, get_goodput
from controlplane.apps.metrics.services import ClusterWafSample, do_record_cluster_waf

SAMPLE_INTERVAL_S = 5
"""Beat period of the sampler (the migration's schedule)."""
GOODPUT_WINDOW_S = 60.0
"""Goodput of each tick is measured over this trailing window."""


def sample_cluster_waf_now(now: datetime | None = None) -> ClusterWafSample:
    """Compute and record one tick of the cluster WAF timeline."""
    now = now or timezone.now()
    goodput = get_goodput(now - timedelta(seconds=GOODPUT_WINDOW_S), now)
    ratio = goodput.ratio
    sample = ClusterWafSample(
        at=now,
        achieved=get_achieved_waf(now),
        optimum=get_healthy_cluster_optimum(),
        goodput=None if ratio is None else min(max(ratio, 0.0), 1.0),
    )
    do_record_cluster_waf(sample)
    return sample


@shared_task(name="metrics.sample_cluster_waf", ignore_result=True)  # type: ignore[misc]
def sample_cluster_waf() -> dict[str, float | None]:
    s = sample_cluster_waf_now()
    return {"achieved": s.achieved, "optimum": s.optimum, "goodput": s.goodput}
