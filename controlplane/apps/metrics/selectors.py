"""Metric queries: time-range series downsampled in SQL to at most ``max_points`` buckets; the achieved
cluster WAF, goodput and the overview's headline figures (each computed in SQL)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import redis
from django.db import connection
from django.db.models import (
    Avg,
    Count,
    F,
    FloatField,
    Func,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Q,
    Subquery,
    Sum,
    Value,
)
from django.db.models.functions import Cast, Floor, Greatest, Least
from django.utils import timezone

from controlplane.apps.fleet import last_seen
from controlplane.apps.fleet.choices import CommandState, NodeState
from controlplane.apps.fleet.models import AgentCommand, Node
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.metrics.choices import MetricKind
from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.planning.choices import TransitionState
from controlplane.apps.planning.models import Transition
from controlplane.apps.training.choices import TaskState
from controlplane.apps.training.models import TrainingTask


class EpochSeconds(Func):
    """``EXTRACT(EPOCH FROM expr)`` as a float (PostgreSQL)."""

    template = "EXTRACT(EPOCH FROM %(expressions)s)::double precision"
    output_field = FloatField()


@dataclass(frozen=True)
class Point:
    at: datetime
    """Start of the bucket."""
    value: float
    """Average of the bucket's samples."""
    min: float
    max: float
    count: int


@dataclass(frozen=True)
class Series:
    kind: str
    task_id: int | None
    since: datetime | None
    until: datetime
    bucket_seconds: float
    points: list[Point]


def list_series(
    kind: str,
    task_id: int | None,
    since: datetime | None,
    until: datetime | None,
    max_points: int,
) -> Series:
    """Samples of ``kind`` (cluster-wide when ``task_id`` is None) in ``[since, until]``, averaged per bucket.

    The range is cut into ``max_points`` equal buckets; empty buckets produce no point. ``since``
    defaults to the first sample, ``until`` to now.
    """
    until = until or timezone.now()
    qs = MetricSample.objects.filter(kind=kind, at__lte=until)
    qs = qs.filter(task__isnull=True) if task_id is None else qs.filter(task_id=task_id)
    if since is None:
        since = qs.aggregate(first=Min("at"))["first"]
        if since is None:
            return Series(kind, task_id, None, until, 0.0, [])
    qs = qs.filter(at__gte=since)
    span = max((until - since).total_seconds(), 1e-6)
    width = span / max_points
    start = since.timestamp()
    # a sample exactly at ``until`` would open bucket ``max_points``: LEAST folds it into the last one
    raw = Cast(Floor((EpochSeconds(F("at")) - Value(start)) / Value(width)), IntegerField())
    bucket = Least(raw, Value(max_points - 1))
    rows = (
        qs.annotate(bucket=bucket)
        .values("bucket")
        .annotate(avg=Avg("value"), lo=Min("value"), hi=Max("value"), n=Count("id"))
        .order_by("bucket")
    )
    points = [
        Point(
            at=since + timedelta(seconds=r["bucket"] * width),
            value=r["avg"],
            min=r["lo"],
            max=r["hi"],
            count=r["n"],
        )
        for r in rows
    ]
    return Series(kind, task_id, since, until, width, points)


# --- cluster WAF, goodput and the overview's headline figures ------------------------------------

WAF_WINDOW_S = 10.0
"""Achieved FLOP/s samples younger than this make a task's current rate (agents report every second)."""
PRODUCING_STATES = (TaskState.RUNNING,)
"""Only running tasks add to the achieved WAF: a reconfiguring task's last samples are from before its
failure and would hide the drop for a window."""
SCHEDULED_STATES = (TaskState.RUNNING, TaskState.RECONFIGURING)
"""Tasks that are meant to be making progress (goodput's denominator); pending and suspended tasks hold
no devices by the planner's decision, which is not failure cost."""


def list_recent_iteration_times(task_id: int, since: datetime | None, limit: int) -> list[float]:
    """The task's newest ``limit`` iteration-time samples (seconds, newest first), at or after ``since``
    when given: the workload manager's measurements (registered with
    :mod:`controlplane.apps.planning.measurements`)."""
    samples = MetricSample.objects.filter(task_id=task_id, kind=MetricKind.ITERATION_TIME)
    if since is not None:
        samples = samples.filter(at__gte=since)
    return list(samples.order_by("-at").values_list("value", flat=True)[:limit])


def get_achieved_waf(now: datetime | None = None, window_s: float = WAF_WINDOW_S) -> float:
    """Achieved cluster WAF = Σ over running tasks of w(t) x the mean of the task's achieved-FLOP/s
    samples in the last ``window_s`` (a task with no recent sample achieves nothing). One query."""
    now = now or timezone.now()
    recent = (
        MetricSample.objects.filter(
            task=OuterRef("pk"),
            kind=MetricKind.ACHIEVED_FLOPS,
            at__gt=now - timedelta(seconds=window_s),
            at__lte=now,
        )
        .values("task")
        .annotate(mean=Avg("value"))
        .values("mean")
    )
    total = (
        TrainingTask.objects.filter(state__in=PRODUCING_STATES)
        .annotate(rate=Subquery(recent, output_field=FloatField()))
        .aggregate(waf=Sum(F("weight") * F("rate"), output_field=FloatField()))["waf"]
    )
    return float(total or 0.0)


_GOODPUT_SQL = """
WITH win AS (
    SELECT task_id,
           MIN(at) AS first_at,
           MAX(at) AS last_at,
           (ARRAY_AGG(iteration ORDER BY at, id))[1] AS first_iter,
           (ARRAY_AGG(iteration ORDER BY at DESC, id DESC))[1] AS last_iter,
           PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY value) AS t_iter
    FROM {samples}
    WHERE kind = %(kind)s AND task_id IS NOT NULL AND iteration IS NOT NULL
      AND at > %(since)s AND at <= %(until)s
    GROUP BY task_id
),
base AS (
    SELECT DISTINCT ON (task_id) task_id, iteration AS base_iter
    FROM {samples}
    WHERE kind = %(kind)s AND task_id IS NOT NULL AND iteration IS NOT NULL AND at <= %(since)s
      AND at > %(since)s - make_interval(secs => %(lookback_s)s)
    ORDER BY task_id, at DESC, id DESC
),
per_task AS (
    SELECT t.id AS task_id,
           -- useful: net iterations gained in the window x the median iteration time
           GREATEST(COALESCE(w.last_iter - COALESCE(b.base_iter, w.first_iter), 0), 0)
               * COALESCE(w.t_iter, 0) AS useful_s,
           EXTRACT(EPOCH FROM (
               CASE WHEN t.state = ANY(%(scheduled)s) THEN %(until)s
                    WHEN t.finished_at IS NOT NULL
                        THEN LEAST(%(until)s, GREATEST(t.finished_at, COALESCE(w.last_at, t.finished_at)))
                    ELSE COALESCE(w.last_at, %(since)s) END
               - CASE WHEN b.base_iter IS NOT NULL THEN %(since)s ELSE w.first_at END
           )) AS span_s
    FROM {tasks} t
    LEFT JOIN win w ON w.task_id = t.id
    LEFT JOIN base b ON b.task_id = t.id
    WHERE w.task_id IS NOT NULL OR (b.task_id IS NOT NULL AND t.state = ANY(%(scheduled)s))
)
SELECT COALESCE(SUM(LEAST(useful_s, span_s)), 0), COALESCE(SUM(span_s), 0), COUNT(*)
FROM per_task WHERE span_s > 0
"""


@dataclass(frozen=True)
class Goodput:
    useful_s: float
    scheduled_s: float
    tasks: int

    @property
    def ratio(self) -> float | None:
        return self.useful_s / self.scheduled_s if self.scheduled_s > 0 else None


def get_goodput(since: datetime, until: datetime, lookback_s: float = 300.0) -> Goodput:
    """Goodput over ``(since, until]``: the share of scheduled task time spent in iterations that were
    kept. One SQL statement over the tasks' iteration-time samples (each carries the task's iteration
    counter and the interval's median iteration time).

    Per task: ``useful = (iteration at the last sample in the window - iteration at the last sample
    before it) x median iteration time in the window``; a rollback to a checkpoint lowers the counter,
    so recomputed iterations are not counted twice. ``scheduled`` runs from ``since`` (or the task's
    first sample in the window, when it had none in the ``lookback_s`` before) to ``until`` while the
    task is running or reconfiguring (to its end or its last sample otherwise). Detection, transitions,
    stalls and lost work are the difference. Cluster goodput = Σ useful ÷ Σ scheduled (task-time, not
    weighted); each task's useful time is capped at its scheduled time. The median makes it slightly
    pessimistic when iteration times are skewed.
    """
    sql = _GOODPUT_SQL.format(samples=MetricSample._meta.db_table, tasks=TrainingTask._meta.db_table)
    params: dict[str, Any] = {
        "kind": MetricKind.ITERATION_TIME.value,
        "since": since,
        "until": until,
        "lookback_s": lookback_s,
        "scheduled": [s.value for s in SCHEDULED_STATES],
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        useful, scheduled, tasks = cursor.fetchone()
    return Goodput(float(useful), float(scheduled), int(tasks))


@dataclass(frozen=True)
class LatestSample:
    value: float
    at: datetime


def get_latest_cluster_sample(kind: str) -> LatestSample | None:
    row = (
        MetricSample.objects.filter(task__isnull=True, kind=kind)
        .order_by("-at", "-id")
        .values("value", "at")
        .first()
    )
    return None if row is None else LatestSample(row["value"], row["at"])


@dataclass(frozen=True)
class Summary:
    """The overview's headline figures (docs/ARCHITECTURE.md §5, issue 7), each computed in SQL."""

    at: datetime
    waf: LatestSample | None
    optimum: LatestSample | None
    goodput_1h: Goodput
    failures_1h: int
    failures_24h: int
    failures_24h_by_severity: dict[str, int]
    mean_detection_latency_s: float | None
    detection_samples: int
    mean_transition_s: float | None
    transitions_24h: int
    optimum_tasks: int = 0
    """Tasks the healthy-cluster optimum plans for (pending, running, reconfiguring, suspended)."""
    optimum_tasks_measured: int = 0
    """Of those, the tasks whose throughput is calibrated from their measured iteration times (the rest
    are planned with a modelled throughput)."""

    @property
    def share_of_optimum(self) -> float | None:
        if self.waf is None or self.optimum is None or self.optimum.value <= 0:
            return None
        return self.waf.value / self.optimum.value


def _seconds(expr: Any) -> Any:
    return EpochSeconds(expr)


def get_summary(now: datetime | None = None) -> Summary:
    """Headline figures: the latest WAF and optimum samples, goodput over the last hour, failures in
    the last hour / day (primary events: one absorbed into another's handling is not counted again),
    mean detection latency (occurred → detected) and mean transition time (started → finished, completed
    transitions) over the last day."""
    now = now or timezone.now()
    hour, day = now - timedelta(hours=1), now - timedelta(days=1)
    primary = FailureEvent.objects.filter(detected_at__gt=day, detected_at__lte=now).filter(
        Q(handled_by__isnull=True) | Q(handled_by=F("pk"))
    )
    counts = primary.aggregate(
        day=Count("id"),
        hour=Count("id", filter=Q(detected_at__gt=hour)),
        latency=Avg(Greatest(_seconds(F("detected_at") - F("occurred_at")), Value(0.0))),
        latency_n=Count("id"),
    )
    by_severity = {
        row["severity"]: row["n"]
        for row in primary.values("severity").annotate(n=Count("id")).order_by("severity")
    }
    planned = TrainingTask.objects.filter(
        state__in=[TaskState.PENDING, TaskState.RUNNING, TaskState.RECONFIGURING, TaskState.SUSPENDED]
    ).aggregate(n=Count("id"), measured=Count("id", filter=Q(throughput_table__has_key="efficiency")))
    transitions = Transition.objects.filter(
        state=TransitionState.COMPLETED,
        finished_at__gt=day,
        finished_at__lte=now,
        started_at__isnull=False,
    ).aggregate(mean=Avg(_seconds(F("finished_at") - F("started_at"))), n=Count("id"))
    return Summary(
        at=now,
        waf=get_latest_cluster_sample(MetricKind.CLUSTER_WAF),
        optimum=get_latest_cluster_sample(MetricKind.OPTIMAL_WAF),
        goodput_1h=get_goodput(hour, now),
        failures_1h=counts["hour"],
        failures_24h=counts["day"],
        failures_24h_by_severity=by_severity,
        mean_detection_latency_s=counts["latency"],
        detection_samples=counts["latency_n"],
        mean_transition_s=transitions["mean"],
        transitions_24h=transitions["n"],
        optimum_tasks=planned["n"],
        optimum_tasks_measured=planned["measured"],
    )


# --- figures for the Prometheus exposition (exposition.py): SQL aggregates, one query each ------------


@dataclass(frozen=True)
class HistogramCounts:
    """A histogram built from stored rows: cumulative counts per upper bound (``le``), as Prometheus
    wants them, with the observations' count and sum."""

    labels: tuple[str, ...]
    buckets: list[tuple[float, int]]
    count: int
    sum: float


def _histograms(
    qs: Any, value: Any, group_by: tuple[str, ...], bounds: tuple[float, ...]
) -> list[HistogramCounts]:
    """One ``GROUP BY`` query: per group, ``COUNT(*) FILTER (WHERE value <= le)`` for every bound."""
    aggregates: dict[str, Any] = {f"le_{i}": Count("id", filter=Q(v__lte=b)) for i, b in enumerate(bounds)}
    rows = (
        qs.annotate(v=value)
        .values(*group_by)
        .annotate(n=Count("id"), total=Sum("v"), **aggregates)
        .order_by(*group_by)
    )
    return [
        HistogramCounts(
            labels=tuple(str(r[g]) for g in group_by),
            buckets=[(b, int(r[f"le_{i}"])) for i, b in enumerate(bounds)],
            count=int(r["n"]),
            sum=float(r["total"] or 0.0),
        )
        for r in rows
    ]


def _nonnegative_seconds(end: str, start: str) -> Any:
    return Greatest(EpochSeconds(F(end) - F(start)), Value(0.0))


def list_detection_latency_histograms(bounds: tuple[float, ...]) -> list[HistogramCounts]:
    """Detection latency (``detected_at - occurred_at``) of every failure event, by detector."""
    return _histograms(
        FailureEvent.objects.all(), _nonnegative_seconds("detected_at", "occurred_at"), ("detector",), bounds
    )


def list_transition_duration_histograms(bounds: tuple[float, ...]) -> list[HistogramCounts]:
    """Duration (``finished_at - started_at``) of every finished transition, by kind and end state."""
    finished = Transition.objects.filter(started_at__isnull=False, finished_at__isnull=False)
    return _histograms(finished, _nonnegative_seconds("finished_at", "started_at"), ("kind", "state"), bounds)


def count_by(model: Any, field: str) -> dict[str, int]:
    """Rows of ``model`` per value of ``field`` (one ``GROUP BY``)."""
    rows = model.objects.values(field).annotate(n=Count("id")).order_by(field)
    return {str(r[field]): int(r["n"]) for r in rows}


def list_failure_counts() -> list[tuple[str, str, str, int]]:
    """``(detector, kind, severity, events)`` over every stored failure event."""
    rows = (
        FailureEvent.objects.values("detector", "kind", "severity")
        .annotate(n=Count("id"))
        .order_by("detector", "kind", "severity")
    )
    return [(r["detector"], r["kind"], r["severity"], int(r["n"])) for r in rows]


@dataclass(frozen=True)
class LostWork:
    seconds: float
    microbatches: int


def get_lost_work() -> LostWork:
    """Recomputation every transition so far cost (seconds, and micro-batches)."""
    row = Transition.objects.aggregate(s=Sum("lost_work_s"), mb=Sum("lost_microbatches"))
    return LostWork(float(row["s"] or 0.0), int(row["mb"] or 0))


def count_linked_nodes(now: datetime, suspect_after_s: float) -> int:
    """Nodes whose agent link is open. The link carries a heartbeat every second and its closing makes
    a healthy node suspect at once (``live.agent_link.mark_link_closed``), so: a heartbeat younger
    than ``suspect_after_s`` (``fleet.last_seen``) and not suspect."""
    cutoff = now.timestamp() - suspect_after_s
    try:
        fresh = Node.objects.filter(pk__in=last_seen.seen_since(cutoff))
    except redis.RedisError:  # the rows' stamps, written at hello and on state changes
        fresh = Node.objects.filter(last_heartbeat_at__gt=now - timedelta(seconds=suspect_after_s))
    return fresh.exclude(state=NodeState.SUSPECT).count()


@dataclass(frozen=True)
class CommandQueue:
    by_state: dict[str, int]
    """Unacknowledged agent commands: ``pending`` (not yet sent) and ``sent`` (awaiting the ack)."""
    oldest_pending_age_s: float | None


def get_command_queue(now: datetime) -> CommandQueue:
    """The agents' command outbox in one query: commands per open state and the oldest pending one."""
    row = AgentCommand.objects.filter(state__in=(CommandState.PENDING, CommandState.SENT)).aggregate(
        pending=Count("id", filter=Q(state=CommandState.PENDING)),
        sent=Count("id", filter=Q(state=CommandState.SENT)),
        oldest=Min("created_at", filter=Q(state=CommandState.PENDING)),
    )
    oldest = row["oldest"]
    return CommandQueue(
        by_state={"pending": int(row["pending"]), "sent": int(row["sent"])},
        oldest_pending_age_s=None if oldest is None else max((now - oldest).total_seconds(), 0.0),
    )


@dataclass(frozen=True)
class TaskFigure:
    task_id: int
    task_name: str
    kind: str
    value: float
    at: datetime


_LATEST_TASK_SAMPLES_SQL = """
SELECT t.id, t.name, k.kind, s.value, s.at
FROM {tasks} t
CROSS JOIN unnest(%(kinds)s::varchar[]) AS k(kind)
CROSS JOIN LATERAL (
    SELECT m.value, m.at FROM {samples} m
    WHERE m.task_id = t.id AND m.kind = k.kind AND m.at > %(since)s
    ORDER BY m.at DESC, m.id DESC LIMIT 1
) s
WHERE t.state = ANY(%(states)s)
ORDER BY t.id, k.kind
"""


def list_latest_task_samples(kinds: list[str], now: datetime, max_age_s: float) -> list[TaskFigure]:
    """Per running or reconfiguring task and per ``kind``: its newest sample younger than ``max_age_s``
    (one statement; each lookup walks the ``(task, kind, at)`` index backwards)."""
    sql = _LATEST_TASK_SAMPLES_SQL.format(
        tasks=TrainingTask._meta.db_table, samples=MetricSample._meta.db_table
    )
    params: dict[str, Any] = {
        "kinds": kinds,
        "since": now - timedelta(seconds=max_age_s),
        "states": [s.value for s in SCHEDULED_STATES],
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [TaskFigure(int(r[0]), str(r[1]), str(r[2]), float(r[3]), r[4]) for r in rows]
