"""State machines are data; a terminal state is never left, whatever sequence of requests arrives."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.apps.common.errors import InvalidTransition, StaleState
from controlplane.apps.common.statemachine import StateMachine
from controlplane.apps.fleet.choices import COMMAND_MACHINE, DEVICE_MACHINE, NODE_MACHINE
from controlplane.apps.incidents.choices import ALERT_MACHINE
from controlplane.apps.planning.choices import STEP_MACHINE, TRANSITION_MACHINE
from controlplane.apps.training.choices import TASK_MACHINE, TaskState
from controlplane.apps.training.models import TrainingTask
from controlplane.apps.training.services import do_set_task_state
from tests.controlplane.factories import TaskFactory

MACHINES: list[StateMachine] = [
    TASK_MACHINE,
    NODE_MACHINE,
    DEVICE_MACHINE,
    COMMAND_MACHINE,
    ALERT_MACHINE,
    TRANSITION_MACHINE,
    STEP_MACHINE,
]


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
def test_terminal_states_have_no_way_out(machine: StateMachine) -> None:
    for state in machine.terminal:
        assert all(not machine.can(state, other) for other in machine.states)


def test_a_machine_with_a_way_out_of_a_terminal_state_is_refused() -> None:
    with pytest.raises(ValueError, match="terminal"):
        StateMachine("bad", {"a": frozenset({"b"}), "b": frozenset({"a"})}, terminal=frozenset({"b"}))


def test_task_terminal_states_are_exactly_completed_failed_cancelled() -> None:
    assert TASK_MACHINE.terminal == {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED}


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
@given(data=st.data())
def test_random_walks_follow_the_table(machine: StateMachine, data: st.DataObject) -> None:
    state = data.draw(st.sampled_from(sorted(machine.states)))
    for _ in range(20):
        target = data.draw(st.sampled_from(sorted(machine.states)))
        if machine.can(state, target):
            assert not machine.is_terminal(state)
            state = target
        else:
            with pytest.raises(InvalidTransition):
                machine.check(state, target)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(targets=st.lists(st.sampled_from(list(TaskState)), min_size=1, max_size=12))
def test_a_stored_task_never_leaves_a_terminal_state(db: None, targets: list[TaskState]) -> None:
    task = TaskFactory()
    reached_terminal: str | None = None
    for target in targets:
        task.refresh_from_db()
        with contextlib.suppress(InvalidTransition, StaleState):
            do_set_task_state(task, target)
        state = TrainingTask.objects.values_list("state", flat=True).get(pk=task.pk)
        if reached_terminal is not None:
            assert state == reached_terminal
        elif TASK_MACHINE.is_terminal(state):
            reached_terminal = state


def test_compare_and_swap_refuses_a_stale_state(db: None) -> None:
    task = TaskFactory(state=TaskState.PENDING)
    stale = TrainingTask.objects.get(pk=task.pk)
    do_set_task_state(task, TaskState.RUNNING)

    with pytest.raises(StaleState):
        do_set_task_state(stale, TaskState.CANCELLED)  # it still believes the task is pending

    assert TrainingTask.objects.get(pk=task.pk).state == TaskState.RUNNING
