"""Wire messages between a node agent and the coordinator (docs/ARCHITECTURE.md §6).

Every frame on the agent link is one JSON object: an *envelope* carrying one *message*::

    {"protocol_version": 1, "node": "node-a", "session": "3f1c…", "seq": 17,
     "sent_at": "2025-01-01T00:00:00Z", "message": {"type": "heartbeat", …}}

- ``protocol_version``: integer; a receiver that does not support it refuses the frame with a
  :class:`ProtocolError` of code ``version_mismatch`` (listing the versions it speaks) and keeps the
  link open; it never crashes on it.
- ``node``: the sender's node name (the coordinator uses its own name, ``"coordinator"``).
- ``session``: chosen by the agent when it starts (a new process = a new session); the coordinator
  echoes the agent's session on frames it sends, so a frame from a previous agent incarnation can be
  recognised.
- ``seq``: per-sender, per-session counter, strictly increasing (gaps allowed).
- ``sent_at``: sender wall clock, UTC.

Messages are pydantic v2 models with a literal ``type`` and form two discriminated unions:
:data:`AgentMessage` (agent → coordinator) and :data:`CoordinatorMessage` (coordinator → agent).
:class:`ProtocolError` belongs to both.

Idempotency: every :class:`WorkerReport` has a ``report_id`` (UUID) chosen by the agent; the agent
re-sends reports that it could not deliver, so the coordinator must de-duplicate on ``report_id``.
Every command has a ``command_id`` (chosen by the coordinator's outbox) and the task's ``epoch``;
the agent acks every command it receives (also duplicates, with outcome ``duplicate``) and refuses
commands whose epoch is older than the newest it has seen for that task (``stale_epoch``).

Authentication (not part of the frames): the agent opens the WebSocket with the header
``Authorization: Bearer <node token>``. See :mod:`controlplane.core.protocol` for the constants.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from controlplane.core.recipe.model import (
    DataSection,
    EvalSection,
    ModelSection,
    OptimizerSection,
    ScheduleSection,
)

PROTOCOL_VERSION = 1
SUPPORTED_VERSIONS: frozenset[int] = frozenset({1})

# Bounds (what the coordinator's database columns can hold; a frame outside them is ``invalid``).
INT32_MAX = 2**31 - 1
"""PostgreSQL ``integer`` (epochs, ranks, device indexes)."""
INT64_MAX = 2**63 - 1
"""PostgreSQL ``bigint`` (iterations, byte counts, sequence numbers)."""
FLOAT_MAX = 1e30
"""Durations, ratios, FLOP counts: finite and below this."""
MIN_MEDIAN_S = 1e-9
"""A nonzero iteration time below this is not a measurement (rates derived from it would overflow)."""
NAME_MAX = 100
"""Node names, task ids (``Node.name`` is a slug of at most 100 characters)."""
TEXT_MAX = 16_384
"""Messages, details."""
STACK_MAX = 262_144
"""Tracebacks and stack dumps."""
LIST_MAX = 65_536
"""Workers, ranks, snapshots, devices per frame."""
_NO_NUL = r"^[^\x00]*$"
"""PostgreSQL text and JSON cannot hold NUL."""


def _text(max_length: int, min_length: int = 0) -> Any:
    return Field(min_length=min_length, max_length=max_length, pattern=_NO_NUL)


Int32 = Annotated[int, Field(ge=0, le=INT32_MAX)]
Int64 = Annotated[int, Field(ge=0, le=INT64_MAX)]
SignedInt32 = Annotated[int, Field(ge=-INT32_MAX - 1, le=INT32_MAX)]
Seconds = Annotated[float, Field(ge=0, le=FLOAT_MAX)]
Name = Annotated[str, _text(NAME_MAX)]
Text = Annotated[str, _text(TEXT_MAX)]
Stack = Annotated[str, _text(STACK_MAX)]


class _Model(BaseModel):
    """Base: unknown fields are errors (a typo must not pass silently), instances are immutable, and
    floats are finite (``Infinity``/``NaN`` are refused: no column or JSON reader takes them)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def utcnow() -> datetime:
    return datetime.now(UTC)


# --------------------------------------------------------------------------------------------------
# Shared value objects
# --------------------------------------------------------------------------------------------------

DeviceKind = Literal["cpu", "cuda"]
WorkerKind = Literal["megatron", "sim"]
Detector = Literal[
    "node_health",  # coordinator: heartbeats / socket state
    "process_supervision",  # agent: child exit code / signal
    "exception_propagation",  # worker hook: exception caught and forwarded
    "statistical_monitoring",  # agent: iteration timing (hang, straggler)
]
FaultKind = Literal["crash", "exception", "hang", "straggler", "network_error", "node_loss"]
Phase = Literal["train", "first", "checkpoint", "evaluation"]


class DeviceInfo(_Model):
    """One device of the node: a GPU, or a CPU slot standing in for one."""

    index: Int32
    kind: DeviceKind
    name: str = _text(255)
    memory_bytes: Int64


class ParallelConfig(_Model):
    tp: int = Field(default=1, ge=1)
    pp: int = Field(default=1, ge=1)
    dp: int = Field(default=1, ge=1)

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp


class ModelSpec(_Model):
    """GPT model and batch shape (docs/ARCHITECTURE.md §5 TrainingTask.model spec)."""

    layers: int = Field(ge=1)
    hidden: int = Field(ge=1)
    heads: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    vocab: int = Field(ge=1)
    micro_batch: int = Field(ge=1)
    global_batch: int = Field(ge=1)


class RankAssignment(_Model):
    """A global rank placed on a local device of this node."""

    rank: int = Field(ge=0)
    device: int = Field(ge=0)


class Rendezvous(_Model):
    """Where the ranks meet. Every epoch must use its own port (stale gloo addresses break restarts)."""

    master_addr: str
    master_port: int = Field(ge=1, le=65535)
    timeout_s: float = Field(default=60.0, gt=0)


StateSourceKind = Literal[
    "local_device", "same_node", "peer_replica", "memory_snapshot", "checkpoint", "none"
]


class StateSource(_Model):
    """Where a rank takes its model state from (nearest principle, docs/ARCHITECTURE.md §7.6)."""

    rank: int = Field(ge=0)
    kind: StateSourceKind
    source_node: str | None = None
    source_rank: int | None = None
    path: str | None = None
    endpoint: str | None = Field(default=None, description="host:port of the node agent holding it")
    iteration: int | None = Field(default=None, description="iteration the state belongs to")


class WorkerLaunch(_Model):
    """Everything a node needs to run its share of a task's workers."""

    model: ModelSpec
    parallel: ParallelConfig
    world_size: int = Field(ge=1)
    ranks: list[RankAssignment]
    rendezvous: Rendezvous
    iterations: int = Field(ge=0, description="stop after this many iterations in total")
    seed: int = 1234
    checkpoint_dir: str | None = None
    checkpoint_interval: int = Field(default=0, ge=0, description="0: never save")
    checkpoint_keep: int = Field(default=0, ge=0, description="newest checkpoints kept on disk; 0: all")
    collective_timeout_s: float = Field(default=60.0, gt=0)
    state_sources: list[StateSource] = Field(default_factory=list)
    snapshot_interval: int = Field(default=0, ge=0, description="in-memory snapshot every K; 0: off")
    snapshot_replica: str | None = Field(
        default=None, description="host:port of the peer agent that keeps a copy of this node's snapshots"
    )
    data: DataSection | None = Field(
        default=None,
        description="the recipe's data section (paths every node of the task can read); "
        "None: synthetic tokens",
    )
    optimizer: OptimizerSection | None = Field(
        default=None, description="the recipe's optimizer; None: Adam, clipping at 1.0"
    )
    schedule: ScheduleSection | None = Field(
        default=None, description="the recipe's learning-rate schedule; None: a constant 1e-3"
    )
    architecture: ModelSection | None = Field(
        default=None,
        description="the recipe's model section (query groups, activation, position embedding, "
        "normalization, embedding tying, dropout); None: multi-head attention, GELU, learned positions, "
        "LayerNorm, untied embeddings",
    )
    eval: EvalSection | None = Field(
        default=None, description="the recipe's evaluation (validation loss every interval); None: none"
    )


class RankMapping(_Model):
    """A rank that survives a reconfiguration in place: its old global rank and its new one."""

    old_rank: int = Field(ge=0)
    new_rank: int = Field(ge=0)


class FaultSpec(_Model):
    """A fault to inject for drills and tests."""

    kind: FaultKind
    rank: int | None = Field(default=None, description="target rank; None: the node (node_loss)")
    at_iteration: int | None = Field(default=None, description="None: at once / next iteration")
    slowdown: float = Field(default=1.0, ge=1.0, description="straggler: compute time multiplier")
    message: str = "injected fault"


class WorkerStatus(_Model):
    task_id: Name
    epoch: Int32
    rank: Int32
    device: Int32
    pid: Int32 | None
    state: Literal["init", "healthy", "unhealthy", "stopped", "succeeded", "failed"]
    iteration: Int64 | None = None


# --------------------------------------------------------------------------------------------------
# Agent → coordinator
# --------------------------------------------------------------------------------------------------


class SnapshotInfo(_Model):
    """An in-memory snapshot of a task's state that an agent holds (its own or a peer's replica)."""

    task_id: Name
    epoch: Int32
    iteration: Int64
    ranks: list[Int32] = Field(max_length=LIST_MAX, description="ranks (of that epoch) whose shards it holds")
    origin_node: Name
    nbytes: Int64


_WARMING = "the agent's warm spare workers are still starting; a rank placed here now would start cold"
"""Meaning of ``Hello.warming`` / ``Heartbeat.warming``. A returning node whose agent is warming stays
``joining`` (no new ranks are placed on it) until a heartbeat says ``warming: false``; the agent ends
warming when its first spare is ready, when spares give up, or after a bound (``agents.supervisor``)."""


class Hello(_Model):
    """First frame of every connection: who the agent is and what it has."""

    type: Literal["hello"] = "hello"
    agent_version: str = _text(64)
    hostname: str = _text(255)
    worker_kind: WorkerKind
    devices: list[DeviceInfo] = Field(max_length=LIST_MAX)
    workers: list[WorkerStatus] = Field(
        default_factory=list, max_length=LIST_MAX, description="still running (reconnect)"
    )
    task_epochs: dict[Name, Int32] = Field(
        default_factory=dict, max_length=LIST_MAX, description="newest epoch seen per task"
    )
    snapshot_endpoint: str | None = Field(
        default=None,
        max_length=255,
        pattern=_NO_NUL,
        description="host:port where this agent serves in-memory snapshots to peers",
    )
    snapshots: list[SnapshotInfo] = Field(
        default_factory=list, max_length=LIST_MAX, description="snapshots this agent holds"
    )
    warming: bool = Field(default=False, description=_WARMING)


class Heartbeat(_Model):
    """Sent every second (node health monitoring)."""

    type: Literal["heartbeat"] = "heartbeat"
    uptime_s: Seconds
    workers: list[WorkerStatus] = Field(default_factory=list, max_length=LIST_MAX)
    pending_reports: Int64 = Field(default=0, description="reports buffered, not yet delivered")
    snapshots: list[SnapshotInfo] = Field(
        default_factory=list, max_length=LIST_MAX, description="snapshots this agent holds"
    )
    warming: bool = Field(default=False, description=_WARMING)


class WorkerStarted(_Model):
    kind: Literal["started"] = "started"
    pid: Int32


class WorkerExited(_Model):
    """Process supervision: the child is gone. ``exit_code`` is None when a signal killed it."""

    kind: Literal["exited"] = "exited"
    exit_code: SignedInt32 | None
    signal: Int32 | None = None
    signal_name: Name | None = None
    expected: bool = Field(description="True when the agent stopped it or it finished its iterations")


class WorkerException(_Model):
    """Exception propagation: caught by the hook in the worker and forwarded."""

    kind: Literal["exception"] = "exception"
    exc_type: str = _text(255)
    message: Text
    traceback: Stack
    iteration: Int64 | None = None
    in_collective: bool = False
    waiting: bool = Field(
        default=False,
        description="the worker stays alive with its state and waits for the coordinator's order "
        "(elastic mode): a restart can keep it in place",
    )


class IterationStats(_Model):
    """Per-rank iteration summary over a reporting interval (or one iteration)."""

    kind: Literal["iteration_stats"] = "iteration_stats"
    first_iteration: Int64
    last_iteration: Int64
    iterations: Int64
    median_s: Seconds
    max_s: Seconds
    compute_median_s: Seconds = Field(description="time to finish the micro-batches, before sync")
    micro_batches: Int64
    tokens: Int64
    model_flops: Seconds
    loss: float | None = Field(default=None, ge=-FLOAT_MAX, le=FLOAT_MAX)
    validation_loss: float | None = Field(
        default=None,
        ge=-FLOAT_MAX,
        le=FLOAT_MAX,
        description="the evaluation's that ran since the previous report (the latest), when one ran",
    )
    validation_iteration: Int64 | None = Field(
        default=None, description="the iteration after which validation_loss was measured"
    )
    learning_rate: float | None = Field(default=None, ge=0, le=FLOAT_MAX)
    grad_norm: float | None = Field(default=None, ge=0, le=FLOAT_MAX)

    @model_validator(mode="after")
    def _measured(self) -> Self:
        # rates are tokens (or FLOPs) / iterations / median_s: a nonzero median below a nanosecond
        # is no measurement and would overflow them to infinity
        if 0 < self.median_s < MIN_MEDIAN_S:
            raise ValueError(f"median_s {self.median_s} is below {MIN_MEDIAN_S} s (0 or a real measurement)")
        if self.first_iteration > self.last_iteration:
            raise ValueError("first_iteration is after last_iteration")
        return self


class HangVerdict(_Model):
    """Statistical monitoring: an iteration ran past the threshold. Stack captured before the kill."""

    kind: Literal["hang"] = "hang"
    iteration: Int64
    elapsed_s: Seconds
    threshold_s: Seconds
    median_iteration_s: Seconds | None
    phase: Phase
    stack: Stack
    in_collective: bool = False
    """The rank was waiting for its peers, not stuck in its own work: it had finished its micro-batches and
    was still in the gradient all-reduce one more threshold later, or its stack shows it blocked in a
    collective or a pipeline send/receive. The link to a peer or the peer failed: such a verdict is a
    consequence, never evidence against the rank's device."""


class StragglerVerdict(_Model):
    """Statistical monitoring: a rank persistently slower than its peers (or than its own history)."""

    kind: Literal["straggler"] = "straggler"
    iteration: Int64
    compute_s: Seconds
    peer_median_s: Seconds
    ratio: Seconds
    stack: Stack = ""


TransitionPhase = Literal[
    "start", "teardown", "data", "rendezvous", "build", "migrate", "recompute", "first_iteration"
]


class TransitionReport(_Model):
    """A rank finished moving into a new epoch (docs/ARCHITECTURE.md §7.6): how, from where, and what it cost.

    Sent once per rank after its first completed iteration in the new epoch. ``phases_s`` holds the
    time spent per phase, in order: a fresh process's start (from its assignment to its first step:
    a warm spare's is short, a cold process pays its imports), teardown of the old groups, opening
    the task's data (a survivor keeps it open), rendezvous of the new groups, building the model and
    optimizer for the new layout, state migration, recomputation of the interrupted iteration's
    unfinished micro-batches, the first iteration.
    """

    kind: Literal["transition"] = "transition"
    from_epoch: Int32 | None = Field(description="None: the rank did not exist before (fresh start)")
    iteration: Int64 = Field(description="first iteration completed in the new epoch")
    in_place: bool = Field(description="True: the process survived and rebuilt its groups")
    source: StateSourceKind
    source_node: Name | None = None
    source_rank: Int32 | None = None
    bytes_moved: Int64 = 0
    phases_s: dict[TransitionPhase, Seconds] = Field(default_factory=dict)
    reused_micro_batches: Int32 = Field(default=0, description="partial results kept")
    recomputed_micro_batches: Int32 = Field(default=0, description="lost work, in micro-batches")
    rolled_back_iterations: Int32 = Field(default=0, description="iterations redone (checkpoint)")


class CheckpointSaved(_Model):
    """A persistent checkpoint of the task is complete on storage every node of the task can read."""

    kind: Literal["checkpoint_saved"] = "checkpoint_saved"
    iteration: Int64
    path: str = _text(TEXT_MAX, min_length=1)
    size_bytes: Int64
    validation_loss: float | None = Field(default=None, ge=-FLOAT_MAX, le=FLOAT_MAX)


WorkerEvent = Annotated[
    WorkerStarted
    | WorkerExited
    | WorkerException
    | IterationStats
    | HangVerdict
    | StragglerVerdict
    | TransitionReport
    | CheckpointSaved,
    Field(discriminator="kind"),
]


class WorkerReport(_Model):
    """Evidence about one worker. Agents send evidence; the coordinator classifies (STYLE §7)."""

    type: Literal["worker_report"] = "worker_report"
    report_id: str = Field(max_length=64, description="UUID chosen by the agent; re-sent reports keep it")
    task_id: Name
    epoch: Int32
    rank: Int32
    device: Int32
    detector: Detector | None = Field(description="which in-band detector produced it; None: progress")
    occurred_at: datetime = Field(description="when it happened (worker clock when known)")
    detected_at: datetime = Field(description="when the detector noticed")
    event: WorkerEvent


AckOutcome = Literal["accepted", "done", "duplicate", "stale_epoch", "rejected", "failed"]


class Ack(_Model):
    """Answer to a command. ``accepted``: work began; ``done``: finished; the rest are refusals."""

    type: Literal["ack"] = "ack"
    command_id: str = Field(max_length=64)
    outcome: AckOutcome
    detail: Text = ""


# --------------------------------------------------------------------------------------------------
# Coordinator → agent
# --------------------------------------------------------------------------------------------------


class _Command(_Model):
    command_id: str
    task_id: str
    epoch: int = Field(ge=0)


SnapshotSecret = Annotated[str, Field(min_length=32, max_length=128, pattern=r"^[0-9a-f]+$")]
_SECRET = (
    "the task's snapshot-plane key (hex): every snapshot transfer of the task between agents carries an "
    "HMAC made with it (agents.snapshots); None: the agent keeps the one it has"
)


class StartWorkersCommand(_Command):
    type: Literal["start_workers"] = "start_workers"
    launch: WorkerLaunch
    snapshot_secret: SnapshotSecret | None = Field(default=None, description=_SECRET)


class StopWorkersCommand(_Command):
    type: Literal["stop_workers"] = "stop_workers"
    ranks: list[int] | None = Field(default=None, description="None: all of the task's local ranks")
    grace_s: float = Field(default=5.0, ge=0)
    task_ended: bool = Field(
        default=False,
        description="the task is over (cancelled, failed): the agent also deletes the task's in-memory "
        "snapshots it holds (False: the task moves on elsewhere or is suspended, and its snapshots may "
        "still be its state source)",
    )


class ReconfigureCommand(_Command):
    """Move the task's local workers to a new epoch: new ranks / world / parallel config
    (docs/ARCHITECTURE.md §7.6).

    Ranks listed in ``survivors`` whose process is still alive on this node rebuild their process
    groups in place, keeping model, optimizer and accumulated gradients; the other local ranks of
    ``launch`` start fresh processes and take their state from ``launch.state_sources``; local
    workers of the task not in ``launch.ranks`` stop. ``survivors`` lists every surviving rank of
    the task (all nodes), so each worker knows which of the previous epoch's micro-batches are lost.
    """

    type: Literal["reconfigure"] = "reconfigure"
    launch: WorkerLaunch
    resume_iteration: int | None = Field(
        default=None, description="the interrupted iteration to finish first (None: the next one)"
    )
    previous_epoch: int | None = None
    previous_parallel: ParallelConfig | None = None
    survivors: list[RankMapping] = Field(default_factory=list)
    snapshot_secret: SnapshotSecret | None = Field(default=None, description=_SECRET)


class SnapshotGrant(_Model):
    """The snapshot key of a task whose snapshots this node keeps and serves: it is the replica peer
    (``WorkerLaunch.snapshot_replica``) of a node that runs the task, or it runs the task and its agent
    restarted (the key came in commands it no longer remembers). Sent by the coordinator after hello and
    when a launch names the node as a replica peer; not a command (no ack)."""

    type: Literal["snapshot_grant"] = "snapshot_grant"
    task_id: Name
    secret: SnapshotSecret


class RetryCommand(_Command):
    """Retry in place after a transient fault (sev3): relaunch the local ranks with the same config
    at a new rendezvous, resuming from the newest local state."""

    type: Literal["retry"] = "retry"
    iteration: int | None = None
    rendezvous: Rendezvous


class InjectFaultCommand(_Command):
    type: Literal["inject_fault"] = "inject_fault"
    fault: FaultSpec


class DrainCommand(_Model):
    """Stop accepting work on this node; stop all workers after ``grace_s``. Not task-scoped."""

    type: Literal["drain"] = "drain"
    command_id: str
    task_id: str | None = None
    epoch: int = Field(default=0, ge=0)
    grace_s: float = Field(default=5.0, ge=0)


# --------------------------------------------------------------------------------------------------
# Both directions
# --------------------------------------------------------------------------------------------------

ProtocolErrorCode = Literal[
    "malformed",  # not JSON / not an object
    "version_mismatch",  # protocol_version not supported
    "unknown_type",  # message.type not known in this direction
    "invalid",  # fields fail validation
    "unauthorized",  # node in envelope does not match the token
    "forbidden",  # the node speaks about a task, epoch or rank it does not run
    "out_of_order",  # seq not above the previous frame's
]


class ProtocolError(_Model):
    """Reply to a frame that could not be accepted. The link stays up."""

    type: Literal["protocol_error"] = "protocol_error"
    code: ProtocolErrorCode
    detail: Text
    in_reply_to_seq: Int64 | None = None
    supported_versions: list[int] = Field(default_factory=lambda: sorted(SUPPORTED_VERSIONS))


AgentMessage = Annotated[Hello | Heartbeat | WorkerReport | Ack | ProtocolError, Field(discriminator="type")]
CoordinatorMessage = Annotated[
    StartWorkersCommand
    | StopWorkersCommand
    | ReconfigureCommand
    | RetryCommand
    | InjectFaultCommand
    | DrainCommand
    | SnapshotGrant
    | ProtocolError,
    Field(discriminator="type"),
]
Command = (
    StartWorkersCommand
    | StopWorkersCommand
    | ReconfigureCommand
    | RetryCommand
    | InjectFaultCommand
    | DrainCommand
)
COMMAND_TYPES: tuple[type[_Model], ...] = (
    StartWorkersCommand,
    StopWorkersCommand,
    ReconfigureCommand,
    RetryCommand,
    InjectFaultCommand,
    DrainCommand,
)


class _Envelope(_Model):
    protocol_version: int = PROTOCOL_VERSION
    node: str = _text(NAME_MAX, min_length=1)
    session: str = _text(64, min_length=1)
    seq: Int64 = Field(description="strictly increasing per session: a lower or repeated one is refused")
    sent_at: datetime = Field(default_factory=utcnow)


class AgentEnvelope(_Envelope):
    """A frame sent by an agent."""

    message: AgentMessage


class CoordinatorEnvelope(_Envelope):
    """A frame sent by the coordinator."""

    message: CoordinatorMessage
