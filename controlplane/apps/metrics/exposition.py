"""The control plane's Prometheus exposition, built from PostgreSQL (and Redis) at scrape time.

daphne, the Celery workers and beat are separate processes, so no in-process counter would see the
whole picture: :class:`ControlPlaneCollector` reads the stored rows instead, with SQL aggregates (about
a dozen queries per scrape, none per row). Counters and histograms built from rows (failures,
detection latency, transition durations, lost work) only grow while rows are kept; Prometheus treats a
decrease (rows deleted) as a counter reset.

Families (all prefixed ``unicron_``): cluster WAF, healthy-cluster optimum and goodput (the sampler's
latest tick), tasks / nodes / devices by state, agent links open, the agents' command queue, failure
events by detector, kind and severity, detection latency and transition duration histograms, lost
work, Celery queueing delay (:mod:`controlplane.apps.metrics.celery_latency`), and per task achieved
FLOP/s, tokens/s and iteration time. Loss is not stored, so it is not exported.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from datetime import datetime

import redis
from django.conf import settings
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from controlplane.apps.fleet import last_seen
from controlplane.apps.fleet.choices import CommandState, DeviceState, NodeState
from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.metrics import celery_latency
from controlplane.apps.metrics.choices import MetricKind
from controlplane.apps.metrics.selectors import (
    HistogramCounts,
    count_by,
    count_linked_nodes,
    get_command_queue,
    get_latest_cluster_sample,
    get_lost_work,
    list_detection_latency_histograms,
    list_failure_counts,
    list_latest_task_samples,
    list_transition_duration_histograms,
)
from controlplane.apps.training.choices import TaskState
from controlplane.apps.training.models import TrainingTask

log = logging.getLogger(__name__)

DETECTION_BOUNDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0)
TRANSITION_BOUNDS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
TASK_SAMPLE_MAX_AGE_S = 60.0
"""A task's rates are exported from its newest sample younger than this (agents report every second);
a task that stopped reporting drops out instead of showing a stale rate."""

TASK_FAMILIES = {
    MetricKind.ACHIEVED_FLOPS: ("unicron_task_achieved_flops", "Achieved model FLOP/s of the task."),
    MetricKind.TOKENS_PER_S: ("unicron_task_tokens_per_second", "Tokens per second the task trains."),
    MetricKind.ITERATION_TIME: (
        "unicron_task_iteration_seconds",
        "Median iteration time of the task's latest report interval.",
    ),
    MetricKind.TRAINING_LOSS: (
        "unicron_task_training_loss",
        "Training loss (mean per token) of the task's latest report interval.",
    ),
}
CLUSTER_FAMILIES = {
    MetricKind.CLUSTER_WAF: (
        "unicron_cluster_waf_flops",
        "Cluster weighted achieved FLOP/s: sum over running tasks of weight x achieved FLOP/s.",
    ),
    MetricKind.OPTIMAL_WAF: (
        "unicron_cluster_optimal_waf_flops",
        "Healthy-cluster optimum WAF: the planner's best with every non-quarantined node healthy.",
    ),
    MetricKind.GOODPUT: (
        "unicron_cluster_goodput_ratio",
        "Share of scheduled task time spent in iterations that were kept (trailing minute).",
    ),
}


def _by_state(name: str, doc: str, counts: dict[str, int], states: Iterable[str]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=["state"])
    for state in sorted(set(states) | set(counts)):
        family.add_metric([state], counts.get(state, 0))
    return family


def _histogram(name: str, doc: str, labels: list[str], rows: list[HistogramCounts]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=labels)
    for row in rows:
        buckets = [(repr(float(b)), float(n)) for b, n in row.buckets] + [("+Inf", float(row.count))]
        family.add_metric(list(row.labels), buckets, sum_value=row.sum)
    return family


class ControlPlaneCollector(Collector):
    """Reads the figures when Prometheus scrapes (``collect`` runs in the request's thread)."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now

    def describe(self) -> list[Metric]:
        return []  # nothing at registration: the families are read at scrape time

    def collect(self) -> Iterator[Metric]:
        began = time.monotonic()
        now = self.now or timezone.now()
        yield from self._cluster(now)
        yield from self._fleet(now)
        yield from self._failures()
        yield from self._tasks(now)
        yield from self._celery()
        yield GaugeMetricFamily(
            "unicron_metrics_scrape_duration_seconds",
            "Seconds this exposition took to build (its SQL and Redis reads).",
            value=time.monotonic() - began,
        )

    def _cluster(self, now: datetime) -> Iterator[Metric]:
        for kind, (name, doc) in CLUSTER_FAMILIES.items():
            family = GaugeMetricFamily(name, doc)
            latest = get_latest_cluster_sample(kind)
            if latest is not None:
                family.add_metric([], latest.value)
            yield family
            if kind == MetricKind.CLUSTER_WAF:
                age = GaugeMetricFamily(
                    "unicron_cluster_waf_sample_age_seconds",
                    "Age of the latest cluster WAF sample (the sampler ticks every 5 s).",
                )
                if latest is not None:
                    age.add_metric([], max((now - latest.at).total_seconds(), 0.0))
                yield age

    def _fleet(self, now: datetime) -> Iterator[Metric]:
        yield _by_state(
            "unicron_tasks", "Training tasks by state.", count_by(TrainingTask, "state"), TaskState
        )
        yield _by_state("unicron_nodes", "Nodes by state.", count_by(Node, "state"), NodeState)
        yield _by_state("unicron_devices", "Devices by state.", count_by(Device, "state"), DeviceState)
        yield GaugeMetricFamily(
            "unicron_agent_links_open",
            "Nodes whose agent link is open (a heartbeat younger than UNICRON_SUSPECT_AFTER_S, link not "
            "seen closing).",
            value=count_linked_nodes(now, settings.UNICRON_SUSPECT_AFTER_S),
        )
        delay = GaugeMetricFamily(
            "unicron_agent_link_delay_seconds",
            "Queueing delay of the agent link's latest heartbeats (arrival minus the agent's time of "
            "sending, corrected for its clock offset), by quantile.",
            labels=["quantile"],
        )
        try:
            measured = last_seen.link_delay()
        except redis.RedisError as exc:
            log.warning("metrics: agent link delay unavailable: %s", exc)
            measured = None
        if measured is not None:
            for quantile, value in (("0.5", measured.p50_s), ("0.99", measured.p99_s), ("1", measured.max_s)):
                delay.add_metric([quantile], value)
        yield delay
        queue = get_command_queue(now)
        yield _by_state(
            "unicron_agent_commands",
            "Agent commands not yet acknowledged: pending (not sent) and sent (awaiting the ack).",
            queue.by_state,
            (CommandState.PENDING, CommandState.SENT),
        )
        oldest = GaugeMetricFamily(
            "unicron_agent_command_oldest_pending_age_seconds",
            "Age of the oldest agent command not yet sent (absent when none is pending).",
        )
        if queue.oldest_pending_age_s is not None:
            oldest.add_metric([], queue.oldest_pending_age_s)
        yield oldest

    def _failures(self) -> Iterator[Metric]:
        failures = CounterMetricFamily(
            "unicron_failure_events",
            "Failure events detected, by detector, kind (the classification rule or verdict) and severity.",
            labels=["detector", "kind", "severity"],
        )
        for detector, kind, severity, n in list_failure_counts():
            failures.add_metric([detector, kind, severity], n)
        yield failures
        yield _histogram(
            "unicron_failure_detection_latency_seconds",
            "Failure detection latency (occurred -> detected), by detector.",
            ["detector"],
            list_detection_latency_histograms(DETECTION_BOUNDS),
        )
        yield _histogram(
            "unicron_transition_duration_seconds",
            "Duration of finished transitions (started -> finished), by kind and end state.",
            ["kind", "state"],
            list_transition_duration_histograms(TRANSITION_BOUNDS),
        )
        lost = get_lost_work()
        yield CounterMetricFamily(
            "unicron_lost_work_seconds",
            "Recomputation the transitions cost, in seconds of training.",
            value=lost.seconds,
        )
        yield CounterMetricFamily(
            "unicron_lost_microbatches",
            "Micro-batches the transitions had to recompute.",
            value=lost.microbatches,
        )

    def _tasks(self, now: datetime) -> Iterator[Metric]:
        families = {
            kind: GaugeMetricFamily(name, doc, labels=["task_id", "task"])
            for kind, (name, doc) in TASK_FAMILIES.items()
        }
        for f in list_latest_task_samples([str(k) for k in TASK_FAMILIES], now, TASK_SAMPLE_MAX_AGE_S):
            families[MetricKind(f.kind)].add_metric([str(f.task_id), f.task_name], f.value)
        yield from families.values()

    def _celery(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            "unicron_celery_task_queue_delay_seconds",
            "Celery tasks: seconds from publication to a worker starting them, by task name.",
            labels=["task"],
        )
        try:
            delays = celery_latency.read_queue_delay()
        except redis.RedisError as exc:
            log.warning("metrics: celery queue delay unavailable: %s", exc)
            delays = []
        for d in delays:
            buckets = [(repr(float(b)), float(n)) for b, n in d.buckets] + [("+Inf", float(d.count))]
            family.add_metric([d.task_name], buckets, sum_value=d.sum)
        yield family


def render_exposition(now: datetime | None = None) -> bytes:
    """The text exposition of every control-plane family."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ControlPlaneCollector(now))
    return generate_latest(registry)
