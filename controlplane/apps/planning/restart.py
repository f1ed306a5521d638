"""In-place recovery (sev2 restart, sev3 retry): the task keeps its devices and ranks, and moves to a new
epoch with a new rendezvous."""

from __future__ import annotations

from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.planning.choices import PlanTrigger, TransitionKind
from controlplane.apps.planning.launch import start_transition
from controlplane.apps.planning.locking import orchestration_lock
from controlplane.apps.planning.models import Plan, Transition
from controlplane.apps.planning.records import TaskDecision, config_record
from controlplane.apps.planning.selectors import load_task_view
from controlplane.apps.planning.services import (
    PlanRecord,
    do_record_plan,
)
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.core.orchestration import DeviceSlot, Layout, RankPlacement


def same_placements(task: TrainingTask) -> tuple[list[RankPlacement], Layout]:
    """The task's current allocation as placements (a restart or retry keeps devices and ranks)."""
    cfg = task.parallel_config or {}
    layout = Layout(int(cfg.get("tp", 1)), int(cfg.get("pp", 1)), int(cfg.get("dp", 1)))
    out = []
    for a in (
        Allocation.objects.filter(task=task, active=True).select_related("device__node").order_by("rank")
    ):
        slot = DeviceSlot(a.device.node.name, a.device.index, a.device_id)
        out.append(RankPlacement(a.rank, slot, a.tp_rank, a.pp_rank, a.dp_rank))
    return out, layout


def failure_plan(task: TrainingTask, event: FailureEvent, workers: int) -> Plan:
    """A plan row for an in-place recovery (restart, retry): the task keeps its devices."""
    return do_record_plan(
        PlanRecord(
            trigger=PlanTrigger.FAILURE,
            input_snapshot={"task": task.pk, "action": event.action, "event": event.pk},
            decisions=[
                TaskDecision(
                    task=task.pk,
                    name=task.name,
                    old_workers=workers,
                    new_workers=workers,
                    old_config=config_record(task.parallel_config),
                    new_config=config_record(task.parallel_config),
                )
            ],
            expected_waf=0.0,
            transition_cost=0.0,
            d_running_s=0.0,
            compute_time_ms=0.0,
            failure_event=event,
            explanation=f"{event.severity} {event.kind}: {event.action} on the same devices",
        )
    )


def restart_in_place(
    task: TrainingTask, event: FailureEvent, failed_ranks: set[int], kind: TransitionKind
) -> Transition | None:
    """sev2 (restart) / sev3 (retry): same devices and ranks, a new epoch and rendezvous. Returns None
    when the task holds no usable allocation any more (the caller re-plans instead)."""
    orchestration_lock()
    view, held = load_task_view(task)
    if not held or any(not h.usable for h in held) or not task.parallel_config:
        return None
    placements, layout = same_placements(task)
    plan = failure_plan(task, event, len(placements))
    alive = {h.rank for h in held} - failed_ranks
    survivors = [(p.rank, p.rank) for p in placements if p.rank in alive]
    return start_transition(
        plan,
        task,
        placements,
        layout,
        int(task.parallel_config.get("micro_batch", task.micro_batch_size)),
        kind,
        held,
        alive,
        view,
        event,
        dict(task.parallel_config),
        survivors=survivors,
    )
