"""Stragglers: isolate a slow device only when running without it is worth more (docs/ARCHITECTURE.md §7.2,
§7.3-7.5)."""

from __future__ import annotations

from controlplane.apps.planning.selectors import (
    HeldDevice,
    cluster_state_of,
    load_cluster,
)
from controlplane.apps.training.models import TrainingTask
from controlplane.core.planning import plan as dp_plan


def straggler_isolation_pays(task: TrainingTask, device_id: int, ratio: float) -> tuple[bool, str]:
    """A straggler slows its whole (synchronous) task by ``ratio``. Isolating its device pays when the
    plan without the device yields more WAF than the cluster now yields with the task slowed down;
    otherwise (e.g. the task cannot run on fewer devices) the slow device is kept and an operator told.
    """
    from controlplane.core.planning import waf

    view = load_cluster()
    state = cluster_state_of(view)
    now_waf = 0.0
    for t in state.problem.tasks:
        f = waf(t.weight, t.table, t.workers, t.min_workers, t.max_workers)
        now_waf += f / max(ratio, 1.0) if t.task_id == str(task.pk) else f
    view.usable = [d for d in view.usable if d.device_id != device_id]
    view.held = {
        k: [HeldDevice(h.slot, h.rank, h.usable and h.slot.device_id != device_id) for h in hs]
        for k, hs in view.held.items()
    }
    without = dp_plan(cluster_state_of(view, [task.pk]).problem)
    pays = without.expected_waf > now_waf
    return pays, (
        f"WAF without the device {without.expected_waf:.4g} vs {now_waf:.4g} with the task slowed "
        f"{ratio:.2f}x: {'isolate' if pays else 'keep it'}"
    )
