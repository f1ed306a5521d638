"""Plan triggers and the transition / step state machines."""

from __future__ import annotations

from django.db import models

from controlplane.apps.common.statemachine import StateMachine


class PlanTrigger(models.TextChoices):
    FAILURE = "failure"
    NODE_JOINED = "node_joined"
    NODE_LEFT = "node_left"
    TASK_SUBMITTED = "task_submitted"
    TASK_FINISHED = "task_finished"
    WEIGHT_CHANGED = "weight_changed"
    PRECOMPUTED = "precomputed"
    MANUAL = "manual"


class TransitionKind(models.TextChoices):
    """What a transition does to the task's workers."""

    LAUNCH = "launch"  # 0 -> x: start workers
    RECONFIGURE = "reconfigure"  # x -> y (or new devices): reconfigure at a new epoch
    RESTART = "restart"  # sev2: same devices, new epoch, failed ranks restarted
    RETRY = "retry"  # sev3: same processes config, new rendezvous
    SUSPEND = "suspend"  # x -> 0: stop workers


class TransitionState(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    ROLLED_BACK = "rolled_back"


T = TransitionState
TRANSITION_MACHINE: StateMachine = StateMachine(
    "transition",
    {
        T.PENDING: frozenset({T.RUNNING, T.FAILED, T.ROLLED_BACK}),
        T.RUNNING: frozenset({T.COMPLETED, T.FAILED, T.ROLLED_BACK}),
        T.COMPLETED: frozenset(),
        T.FAILED: frozenset(),
        T.ROLLED_BACK: frozenset(),
    },
    terminal=frozenset({T.COMPLETED, T.FAILED, T.ROLLED_BACK}),
)


class StepState(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"


S = StepState
STEP_MACHINE: StateMachine = StateMachine(
    "transition step",
    {
        S.PENDING: frozenset({S.RUNNING, S.SKIPPED, S.FAILED}),
        S.RUNNING: frozenset({S.DONE, S.FAILED, S.SKIPPED}),  # skipped: its transition was superseded
        S.DONE: frozenset(),
        S.FAILED: frozenset(),
        S.SKIPPED: frozenset(),
    },
    terminal=frozenset({S.DONE, S.FAILED, S.SKIPPED}),
)


class MigrationSource(models.TextChoices):
    """Where a worker's state came from, nearest first (docs/ARCHITECTURE.md §7.6)."""

    OWN_DEVICE = "own_device"
    SAME_NODE_DEVICE = "same_node_device"
    DP_PEER = "dp_peer"
    LOCAL_SNAPSHOT = "local_snapshot"
    PEER_SNAPSHOT = "peer_snapshot"
    CHECKPOINT = "checkpoint"
