"""The cluster WAF timeline: Celery beat runs ``metrics.sample_cluster_waf`` every
:data:`SAMPLE_INTERVAL_S` seconds (schedule created by migration 0003).

Each tick writes three cluster samples through ``services.do_record_cluster_waf`` (which sends
``waf.sample`` to the dashboards after commit):

- ``cluster_waf``: Σ w(t) x measured achieved FLOP/s of the running tasks (selectors.get_achieved_waf);
- ``optimal_waf``: the healthy-cluster optimum (optimum.get_healthy_cluster_optimum);
- ``goodput``: the share of scheduled task time spent in useful iterations over the last
  :data:`GOODPUT_WINDOW_S` (selectors.get_goodput), when any task was scheduled.

No run row per tick (STYLE §5, as fleet.check_node_health): the samples are the record.

Retention (``metrics.apply_retention``, every :data:`RETENTION_INTERVAL_S`): samples are kept as reported
for ``UNICRON_METRICS_RAW_RETENTION_S`` (6 h), then one per minute per series, and dropped after
``UNICRON_METRICS_RETENTION_DAYS`` (30). A task reports six series about once a second, so 64 tasks write
~33 million rows a day; retained, they hold at ~8.3 million raw rows plus ~0.55 million a day of minutes.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from controlplane.apps.metrics.optimum import get_healthy_cluster_optimum
from controlplane.apps.metrics.selectors import get_achieved_waf, get_goodput
from controlplane.apps.metrics.services import ClusterWafSample, do_apply_retention, do_record_cluster_waf

SAMPLE_INTERVAL_S = 5
"""Beat period of the sampler (the migration's schedule)."""
GOODPUT_WINDOW_S = 60.0
"""Goodput of each tick is measured over this trailing window."""
RETENTION_INTERVAL_S = 600
"""Beat period of ``metrics.apply_retention`` (migration 0006)."""
RETENTION_WINDOW_S = 3 * RETENTION_INTERVAL_S
"""Each run thins this much history before the raw boundary: every row is thinned though runs are missed."""


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


@shared_task(name="metrics.apply_retention", ignore_result=True)  # type: ignore[misc]
def apply_retention() -> dict[str, int]:
    """Every 10 minutes (beat, migration 0006): samples thinned past ``UNICRON_METRICS_RAW_RETENTION_S``,
    dropped past ``UNICRON_METRICS_RETENTION_DAYS``."""
    done = do_apply_retention(
        timezone.now(),
        raw_s=float(settings.UNICRON_METRICS_RAW_RETENTION_S),
        keep_s=float(settings.UNICRON_METRICS_RETENTION_DAYS) * 86400,
        window_s=RETENTION_WINDOW_S,
    )
    return {"thinned": done.thinned, "expired": done.expired}
