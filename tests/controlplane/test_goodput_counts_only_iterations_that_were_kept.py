"""Goodput = Σ (net iterations gained x median iteration time) ÷ Σ scheduled task time, in SQL."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.metrics.selectors import get_goodput
from controlplane.apps.training.models import TrainingTask
from tests.controlplane.factories import TaskFactory

UNTIL = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SINCE = UNTIL - timedelta(seconds=60)
T_ITER = 0.5  # two iterations per second when healthy


def _samples(task: TrainingTask, iteration_at: Callable[[int], int | None], seconds: int = 60) -> None:
    """One iteration-time sample per second from SINCE (k=0) to UNTIL (k=seconds); None: no sample."""
    rows = []
    for k in range(seconds + 1):
        it = iteration_at(k)
        if it is not None:
            rows.append(
                MetricSample(
                    task=task,
                    kind="iteration_time",
                    value=T_ITER,
                    iteration=it,
                    at=SINCE + timedelta(seconds=k),
                )
            )
    MetricSample.objects.bulk_create(rows)


def test_a_healthy_task_has_full_goodput(db: None) -> None:
    _samples(TaskFactory(state="running"), lambda k: 2 * k)

    g = get_goodput(SINCE, UNTIL)

    assert (g.tasks, g.scheduled_s) == (1, 60.0)
    assert g.ratio == pytest.approx(1.0)


def test_a_stall_is_lost_time(db: None) -> None:
    # 20 s without progress (a hang until detection and a transition)
    _samples(TaskFactory(state="running"), lambda k: 2 * k if k <= 20 else None if k <= 40 else 2 * (k - 20))

    assert get_goodput(SINCE, UNTIL).ratio == pytest.approx(40 / 60)


def test_a_rollback_does_not_count_recomputed_iterations_twice(db: None) -> None:
    # at 30 s the task rolls back 10 iterations to a checkpoint and recomputes them
    _samples(TaskFactory(state="running"), lambda k: 2 * k if k < 30 else 2 * k - 10)

    assert get_goodput(SINCE, UNTIL).ratio == pytest.approx((120 - 10) * T_ITER / 60)


def test_a_stalled_task_without_samples_in_the_window_counts_as_zero(db: None) -> None:
    healthy = TaskFactory(state="running")
    stuck = TaskFactory(state="reconfiguring")
    _samples(healthy, lambda k: 2 * k)
    MetricSample.objects.create(task=stuck, kind="iteration_time", value=T_ITER, iteration=7, at=SINCE)

    g = get_goodput(SINCE, UNTIL)

    assert (g.tasks, g.scheduled_s) == (2, 120.0)
    assert g.ratio == pytest.approx(0.5)


def test_a_task_that_completed_counts_only_until_it_finished(db: None) -> None:
    done = TaskFactory(state="completed", finished_at=SINCE + timedelta(seconds=30))
    _samples(done, lambda k: 2 * k if k <= 30 else None)

    g = get_goodput(SINCE, UNTIL)

    assert g.scheduled_s == pytest.approx(30.0)
    assert g.ratio == pytest.approx(1.0)


def test_no_scheduled_task_means_no_goodput(db: None) -> None:
    TaskFactory(state="pending")

    assert get_goodput(SINCE, UNTIL).ratio is None
