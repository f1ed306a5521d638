"""Suspending a task the plan gives no devices (x -> 0): stop its workers, release its devices, alert."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from controlplane.apps.common.triggers import request_transition_advance
from controlplane.apps.fleet.services import (
    do_enqueue_protocol_command,
    do_fail_stale_commands,
)
from controlplane.apps.incidents.choices import Severity
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.incidents.services import do_raise_alert
from controlplane.apps.planning.choices import StepState, TransitionKind, TransitionState
from controlplane.apps.planning.launch import (
    REACHABLE_NODE_STATES,
    deadline_in,
    step_deadlines_s,
    supersede_transitions,
)
from controlplane.apps.planning.models import Plan, Transition
from controlplane.apps.planning.selectors import (
    ClusterView,
    HeldDevice,
)
from controlplane.apps.planning.services import (
    do_create_transition,
    do_set_step_state,
    do_set_transition_state,
)
from controlplane.apps.training.choices import TaskState
from controlplane.apps.training.models import TrainingTask
from controlplane.apps.training.services import (
    do_release_devices,
    do_set_task_plan_fields,
    do_set_task_state,
)
from controlplane.core.protocol import StopWorkersCommand
from controlplane.core.transitions.steps import StepDetail


def suspend(
    plan: Plan,
    task: TrainingTask,
    held: Sequence[HeldDevice],
    view: ClusterView,
    failure_event: FailureEvent | None,
) -> Transition:
    """x -> 0: stop the workers, release the devices, alert (the task waits for capacity)."""
    supersede_transitions(task, f"superseded by plan {plan.pk}")
    t = do_create_transition(
        plan,
        task,
        ["stop"],
        len(held),
        0,
        step_deadlines=[deadline_in(step_deadlines_s(task)[0])],
        kind=TransitionKind.SUSPEND,
        failure_event=failure_event,
        previous_epoch=task.epoch,
    )
    do_set_task_state(task, TaskState.SUSPENDED, bump_epoch=True)
    do_release_devices(task)
    do_fail_stale_commands(task.pk, task.epoch, f"superseded: task {task.pk} moved to epoch {task.epoch}")
    reason = (
        f"suspended: fewer usable devices than its minimum ({task.min_workers}) or others yield more "
        f"weighted FLOP/s (plan {plan.pk})"
    )
    do_set_task_plan_fields(task, pending_reason=reason, parallel_config={})
    command_ids = []
    for node_name in sorted({h.slot.node for h in held}):
        node = view.nodes_by_name[node_name]
        if node.state not in REACHABLE_NODE_STATES:
            continue
        stop = StopWorkersCommand(
            command_id=str(uuid.uuid4()), task_id=str(task.pk), epoch=task.epoch, grace_s=5.0
        )
        cmd = do_enqueue_protocol_command(node, stop, t.pk)
        command_ids.append(str(cmd.command_id))
    step = t.steps.get()
    do_set_step_state(step, StepState.RUNNING, StepDetail(commands=command_ids))
    t = do_set_transition_state(t, TransitionState.RUNNING)
    do_raise_alert(
        Severity.SEV2,
        f"Task {task.name} (#{task.pk}) suspended below its minimum: {reason}",
        source_event=failure_event,
    )
    request_transition_advance(t.pk)  # no command to wait for: completes at once
    return t
