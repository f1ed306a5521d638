"""Agent ⇄ coordinator wire protocol (docs/ARCHITECTURE.md §6). Pure: pydantic only, no Django.

Transport: one WebSocket per agent at ``/ws/agent/``. The agent authenticates with the HTTP header
``Authorization: Bearer <node token>`` on the opening handshake (:data:`AUTH_HEADER`). Each frame
is a text message holding one envelope (see :mod:`.messages` for the fields and semantics).

Conversation:

1. agent connects, sends :class:`Hello` (device inventory, workers still running, epochs seen);
2. agent sends :class:`Heartbeat` every :data:`HEARTBEAT_INTERVAL_S` and :class:`WorkerReport`
   as evidence arrives (buffered while disconnected, re-sent with the same ``report_id``);
3. coordinator sends commands (``*Command``); the agent answers each with an :class:`Ack`;
4. anything that cannot be decoded is answered with :class:`ProtocolError`; the link stays up.

Use :func:`decode_agent_frame` on the coordinator and :func:`decode_coordinator_frame` on the agent.
"""

from controlplane.core.protocol.codec import (
    AGENT_MESSAGE_ADAPTER,
    COORDINATOR_MESSAGE_ADAPTER,
    ProtocolViolation,
    agent_message_types,
    coordinator_message_types,
    decode_agent_frame,
    decode_coordinator_frame,
    encode,
)
from controlplane.core.protocol.messages import (
    COMMAND_TYPES,
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    Ack,
    AckOutcome,
    AgentEnvelope,
    AgentMessage,
    CheckpointSaved,
    Command,
    CoordinatorEnvelope,
    CoordinatorMessage,
    Detector,
    DeviceInfo,
    DrainCommand,
    FaultKind,
    FaultSpec,
    HangVerdict,
    Heartbeat,
    Hello,
    InjectFaultCommand,
    IterationStats,
    ModelSpec,
    ParallelConfig,
    Phase,
    ProtocolError,
    RankAssignment,
    RankMapping,
    ReconfigureCommand,
    Rendezvous,
    RetryCommand,
    SnapshotGrant,
    SnapshotInfo,
    StartWorkersCommand,
    StateSource,
    StateSourceKind,
    StopWorkersCommand,
    StragglerVerdict,
    TransitionPhase,
    TransitionReport,
    WorkerEvent,
    WorkerException,
    WorkerExited,
    WorkerKind,
    WorkerLaunch,
    WorkerReport,
    WorkerStarted,
    WorkerStatus,
    utcnow,
)

AUTH_HEADER = "Authorization"
"""The agent sends ``Authorization: Bearer <token>`` when opening the WebSocket."""
AGENT_WS_PATH = "/ws/agent/"
HEARTBEAT_INTERVAL_S = 1.0
COORDINATOR_NODE = "coordinator"
"""``node`` field of frames sent by the coordinator."""


def bearer(token: str) -> str:
    """Value of the Authorization header for ``token``."""
    return f"Bearer {token}"


__all__ = [
    "AGENT_MESSAGE_ADAPTER",
    "AGENT_WS_PATH",
    "AUTH_HEADER",
    "COMMAND_TYPES",
    "COORDINATOR_MESSAGE_ADAPTER",
    "COORDINATOR_NODE",
    "HEARTBEAT_INTERVAL_S",
    "PROTOCOL_VERSION",
    "SUPPORTED_VERSIONS",
    "Ack",
    "AckOutcome",
    "AgentEnvelope",
    "AgentMessage",
    "CheckpointSaved",
    "Command",
    "CoordinatorEnvelope",
    "CoordinatorMessage",
    "Detector",
    "DeviceInfo",
    "DrainCommand",
    "FaultKind",
    "FaultSpec",
    "HangVerdict",
    "Heartbeat",
    "Hello",
    "InjectFaultCommand",
    "IterationStats",
    "ModelSpec",
    "ParallelConfig",
    "Phase",
    "ProtocolError",
    "ProtocolViolation",
    "RankAssignment",
    "RankMapping",
    "ReconfigureCommand",
    "Rendezvous",
    "RetryCommand",
    "SnapshotGrant",
    "SnapshotInfo",
    "StartWorkersCommand",
    "StateSource",
    "StateSourceKind",
    "StopWorkersCommand",
    "StragglerVerdict",
    "TransitionPhase",
    "TransitionReport",
    "WorkerEvent",
    "WorkerException",
    "WorkerExited",
    "WorkerKind",
    "WorkerLaunch",
    "WorkerReport",
    "WorkerStarted",
    "WorkerStatus",
    "agent_message_types",
    "bearer",
    "coordinator_message_types",
    "decode_agent_frame",
    "decode_coordinator_frame",
    "encode",
    "utcnow",
]
