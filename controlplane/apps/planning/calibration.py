"""Calibration of the throughput model with measured iteration times (docs/ARCHITECTURE.md §7.3)."""

from __future__ import annotations

from typing import Any

from controlplane.apps.planning.launch import parallel_config_json
from controlplane.apps.planning.selectors import (
    ClusterView,
    task_spec,
)
from controlplane.apps.training.choices import TaskState
from controlplane.apps.training.models import Allocation

CALIBRATION_SAMPLES = 20


def recalibrate_tasks(view: ClusterView) -> int:
    """Fit each running task's efficiency factors to its measured iteration times (median of the last
    samples since its current epoch began, per parallel config it ran) and store them with the table
    they give. Returns how many tasks were recalibrated. The next problem built uses them."""
    import statistics

    from controlplane.apps.metrics.choices import MetricKind
    from controlplane.apps.metrics.models import MetricSample
    from controlplane.apps.planning.selectors import task_table
    from controlplane.apps.training.services import do_store_throughput_table
    from controlplane.core.planning import Measurement, MegatronConfig, calibrate

    count = 0
    for task in view.tasks:
        cfg = task.parallel_config or {}
        if task.state != TaskState.RUNNING or not cfg.get("tp"):
            continue
        since = (
            Allocation.objects.filter(task=task, active=True)
            .order_by("created_at")
            .values_list("created_at", flat=True)
            .first()
        )
        if since is None:
            continue
        values = list(
            MetricSample.objects.filter(task=task, kind=MetricKind.ITERATION_TIME, at__gte=since)
            .order_by("-at")
            .values_list("value", flat=True)[:CALIBRATION_SAMPLES]
        )
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
        key = f"{core_cfg.tp}-{core_cfg.pp}-{core_cfg.dp}-{core_cfg.micro_batch}-{core_cfg.num_micro_batches}"
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
