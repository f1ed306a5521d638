"""Fleet states and their state machines (data: allowed transitions, terminal states)."""

from __future__ import annotations

from django.db import models

from controlplane.apps.common.statemachine import StateMachine


class NodeState(models.TextChoices):
    JOINING = "joining"
    HEALTHY = "healthy"
    SUSPECT = "suspect"
    ISOLATED = "isolated"
    LOST = "lost"
    DRAINING = "draining"


N = NodeState
# Nodes have no terminal state: a lost or isolated node may always come back through `joining`.
NODE_MACHINE: StateMachine = StateMachine(
    "node",
    {
        N.JOINING: frozenset({N.HEALTHY, N.LOST, N.ISOLATED, N.DRAINING}),
        N.HEALTHY: frozenset({N.SUSPECT, N.LOST, N.ISOLATED, N.DRAINING}),
        N.SUSPECT: frozenset({N.HEALTHY, N.LOST, N.ISOLATED, N.DRAINING}),
        N.LOST: frozenset({N.JOINING, N.ISOLATED}),
        N.ISOLATED: frozenset({N.JOINING, N.LOST}),
        N.DRAINING: frozenset({N.JOINING, N.LOST, N.ISOLATED}),
    },
)
DRAINABLE_NODE_STATES = frozenset(s for s in NodeState if NODE_MACHINE.can(s, N.DRAINING))


class DeviceState(models.TextChoices):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    FAILED = "failed"
    ISOLATED = "isolated"


D = DeviceState
DEVICE_MACHINE: StateMachine = StateMachine(
    "device",
    {
        D.HEALTHY: frozenset({D.DEGRADED, D.FAILED, D.ISOLATED}),
        D.DEGRADED: frozenset({D.HEALTHY, D.FAILED, D.ISOLATED}),
        D.FAILED: frozenset({D.HEALTHY, D.ISOLATED}),
        D.ISOLATED: frozenset({D.HEALTHY}),
    },
)


class CommandType(models.TextChoices):
    START_WORKERS = "start_workers"
    STOP_WORKERS = "stop_workers"
    RECONFIGURE = "reconfigure"
    RETRY = "retry"
    INJECT_FAULT = "inject_fault"
    DRAIN = "drain"


class CommandState(models.TextChoices):
    PENDING = "pending"
    SENT = "sent"
    ACKED = "acked"
    FAILED = "failed"


C = CommandState
COMMAND_MACHINE: StateMachine = StateMachine(
    "agent command",
    {
        C.PENDING: frozenset({C.SENT, C.FAILED}),
        # a sent command goes back to pending when its agent reconnects, to be re-sent
        C.SENT: frozenset({C.ACKED, C.FAILED, C.PENDING}),
        C.ACKED: frozenset(),
        C.FAILED: frozenset(),
    },
    terminal=frozenset({C.ACKED, C.FAILED}),
)
