"""Training task states: the allowed transitions as one table; terminal states are never left."""

from __future__ import annotations

from django.db import models

from controlplane.apps.common.statemachine import StateMachine


class TaskState(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    RECONFIGURING = "reconfiguring"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


T = TaskState
TERMINAL_TASK_STATES = frozenset({T.COMPLETED, T.FAILED, T.CANCELLED})
TASK_MACHINE: StateMachine = StateMachine(
    "training task",
    {
        T.PENDING: frozenset({T.RUNNING, T.SUSPENDED, T.FAILED, T.CANCELLED}),
        T.RUNNING: frozenset({T.RECONFIGURING, T.SUSPENDED, T.COMPLETED, T.FAILED, T.CANCELLED}),
        T.RECONFIGURING: frozenset({T.RUNNING, T.SUSPENDED, T.FAILED, T.CANCELLED}),
        # a suspended task (planned to zero workers) resumes through a reconfiguration
        T.SUSPENDED: frozenset({T.PENDING, T.RECONFIGURING, T.FAILED, T.CANCELLED}),
        T.COMPLETED: frozenset(),
        T.FAILED: frozenset(),
        T.CANCELLED: frozenset(),
    },
    terminal=TERMINAL_TASK_STATES,
)
CANCELLABLE_TASK_STATES = frozenset(s for s in TaskState if TASK_MACHINE.can(s, T.CANCELLED))


class ParallelRole(models.TextChoices):
    """What a rank does in the task's parallel layout (its TP/PP/DP coordinates are stored too)."""

    WORKER = "worker"
    PIPELINE_FIRST = "pipeline_first"
    PIPELINE_LAST = "pipeline_last"
    PIPELINE_MIDDLE = "pipeline_middle"
