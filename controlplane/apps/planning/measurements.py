"""The iteration times the workers measured, as the workload manager reads them (calibration, the
planner's view of a task's speed), without importing the app that stores them.

The metrics app stores each interval's median iteration time of a task (a ``MetricSample`` of kind
``iteration_time``) and reads plans and transitions for its own figures (the overview, the Prometheus
exposition, the healthy-cluster optimum), so planning sits below it and never imports it: the metrics app
registers its reader here in its ``ready()`` (:func:`register_iteration_times`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.core.exceptions import ImproperlyConfigured

IterationTimes = Callable[[int, datetime | None, int], list[float]]
"""``(task id, since, limit)`` → the task's newest ``limit`` measured iteration times in seconds, newest
first, measured at or after ``since`` (any time when None)."""

_reader: IterationTimes | None = None


def register_iteration_times(reader: IterationTimes) -> None:
    """Install the reader of stored iteration times (the metrics app's, at start-up)."""
    global _reader
    _reader = reader


def list_iteration_times(task_id: int, limit: int, since: datetime | None = None) -> list[float]:
    """The task's newest ``limit`` measured iteration times (seconds, newest first), since ``since``."""
    if _reader is None:
        raise ImproperlyConfigured(
            "no reader of iteration times is registered (is the metrics app installed?)"
        )
    return _reader(task_id, since, limit)
