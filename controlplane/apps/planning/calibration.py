"""Calibration of the throughput model with measured iteration times (docs/ARCHITECTURE.md §7.3)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from controlplane.apps.planning.launch import parallel_config_json
from controlplane.apps.planning.measurements import list_iteration_times
from controlplane.apps.planning.selectors import (
    ClusterView,
    task_spec,
)
from controlplane.apps.training.choices import TaskState
from controlplane.apps.training.models import Allocation, TrainingTask

CALIBRATION_SAMPLES = 20
CALIBRATE_AFTER_SAMPLES = 5
"""Iteration times a running task needs in a layout before that layout's first calibration."""


def layout_key(cfg: dict[str, Any], micro_batch: int) -> str | None:
    """The key a measurement of parallel config ``cfg`` is stored under (None: no layout yet)."""
    if not cfg.get("tp"):
        return None
    return (
        f"{int(cfg['tp'])}-{int(cfg['pp'])}-{int(cfg['dp'])}-{int(cfg.get('micro_batch', micro_batch))}"
        f"-{int(cfg.get('num_micro_batches', 1))}"
    )


def _layout_since(task: TrainingTask) -> datetime | None:
    """When the task's current allocation (its current layout) began; None: it holds no devices."""
    return (
        Allocation.objects.filter(task=task, active=True)
        .order_by("created_at")
        .values_list("created_at", flat=True)
        .first()
    )


def calibrate_new_layouts() -> int:
    """Calibrate every running task whose current layout has no measurement yet, once it has
    :data:`CALIBRATE_AFTER_SAMPLES` iteration times in it (the beat's transition check calls this every
    second; a task already measured in its layout costs one JSON look-up). Without it a task launched by
    the only plan of a quiet cluster would keep the modelled throughput, and the healthy-cluster
    optimum with it, until the next re-plan. Returns how many tasks were calibrated."""
    from django.db import transaction

    from controlplane.apps.planning.selectors import load_cluster

    due: set[int] = set()
    for task in TrainingTask.objects.filter(state=TaskState.RUNNING).only(
        "pk", "parallel_config", "throughput_table", "micro_batch_size"
    ):
        key = layout_key(task.parallel_config or {}, task.micro_batch_size)
        stored: Any = task.throughput_table if isinstance(task.throughput_table, dict) else {}
        measured = {m.get("key") for m in stored.get("measurements") or [] if isinstance(m, dict)}
        if key is None or key in measured:
            continue
        since = _layout_since(task)
        if since is None:
            continue
        if len(list_iteration_times(task.pk, CALIBRATE_AFTER_SAMPLES, since)) >= CALIBRATE_AFTER_SAMPLES:
            due.add(task.pk)
    if not due:
        return 0
    with transaction.atomic():
        return recalibrate_tasks(load_cluster(), only=due)


def recalibrate_tasks(view: ClusterView, only: set[int] | None = None) -> int:
    """Fit each running task's efficiency factors to its measured iteration times (median of the last
    samples since its current epoch began, per parallel config it ran) and store them with the table
    they give. Returns how many tasks were recalibrated. The next problem built uses them.
    ``only``: the tasks to look at (None: every running task)."""
    import statistics

    from controlplane.apps.planning.selectors import task_table
    from controlplane.apps.training.services import do_store_throughput_table
    from controlplane.core.planning import Measurement, MegatronConfig, calibrate

    count = 0
    for task in view.tasks:
        cfg = task.parallel_config or {}
        if task.state != TaskState.RUNNING or not cfg.get("tp") or (only is not None and task.pk not in only):
            continue
        since = _layout_since(task)
        if since is None:
            continue
        values = list_iteration_times(task.pk, CALIBRATION_SAMPLES, since)
        if not values:
            continue
        core_cfg = MegatronConfig(
            int(cfg["tp"]),
            int(cfg["pp"]),
            int(cfg["dp"]),
            int(cfg.get("micro_batch", task.micro_batch_size)),
            int(cfg.get("num_micro_batches", 1)),
            bool(cfg.get("recompute", False)),
        )
        stored: Any = task.throughput_table if isinstance(task.throughput_table, dict) else {}
        known = {
            json_key: m
            for m in stored.get("measurements", [])
            if stored.get("device_kind") == view.device_kind and isinstance(m, dict)
            for json_key in [m.get("key")]
        }
        key = layout_key(cfg, task.micro_batch_size)
        known[key] = {
            "key": key,
            "config": parallel_config_json(core_cfg),
            "iteration_s": statistics.median(values),
        }
        measurements = [
            Measurement(
                MegatronConfig(
                    m["config"]["tp"],
                    m["config"]["pp"],
                    m["config"]["dp"],
                    m["config"]["micro_batch"],
                    m["config"]["num_micro_batches"],
                    m["config"]["recompute"],
                ),
                float(m["iteration_s"]),
            )
            for m in known.values()
        ]
        result = calibrate(task_spec(task), view.kind, measurements)
        eff = result.efficiency
        table = task_table(task, view, eff)
        do_store_throughput_table(
            task,
            {
                "device_kind": view.device_kind,
                "efficiency": {
                    "compute": eff.compute,
                    "communication": eff.communication,
                    "overhead_s": eff.overhead_s,
                },
                "fitted": list(result.fitted),
                "rms_relative_error_before": result.rms_relative_error_before,
                "rms_relative_error_after": result.rms_relative_error_after,
                "measurements": list(known.values()),
                "points": [
                    {
                        "workers": p.workers,
                        "flops_per_s": p.flops_per_s,
                        "iteration_s": p.iteration_s,
                        "config": parallel_config_json(p.config) if p.config else None,
                    }
                    for p in table.points
                ],
            },
        )
        count += 1
    return count
