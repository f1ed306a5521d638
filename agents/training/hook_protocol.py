"""The hook socket's protocol: what a worker tells its agent and what the agent orders it to do.

One JSON object per line on the agent's Unix socket. Worker → agent frames are
:data:`HookEvent` (discriminated by ``ev``); agent → worker frames are :data:`HookOrder`
(discriminated by ``order``). Both sides decode a line once (:func:`decode_event`,
:func:`decode_order`) and dispatch on its type; a malformed frame raises :class:`HookProtocolError`
naming what is wrong, never a ``KeyError`` deep in a handler.

A warm spare (:mod:`agents.training.spare`) says :class:`SpareReady` and waits for an
:class:`AssignOrder`; the local drill CLI (:mod:`agents.drill`) sends one :class:`DrillRequest` and
reads one :class:`DrillAnswer`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from agents.training.assignment import WorkerAssignment
from controlplane.core.protocol import FaultSpec, TransitionReport


class HookProtocolError(ValueError):
    """A hook socket frame that is not valid JSON or not a known, well-formed message."""


class _Frame(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------------------------- worker → agent
class WorkerHello(_Frame):
    """First frame of a worker's connection: binds it to the process the agent started."""

    ev: Literal["hello"] = "hello"
    rank: int
    pid: int


class SpareReady(_Frame):
    """A warm spare has imported everything and waits for an :class:`AssignOrder`."""

    ev: Literal["spare"] = "spare"
    pid: int
    ready_s: float = 0.0
    rss_kb: int = 0
    origin: Literal["exec", "zygote"] = "exec"


class DrillRequest(_Frame):
    """The local drill CLI: inject ``fault`` into a task's workers on this node."""

    ev: Literal["drill"] = "drill"
    task_id: str | None = None
    """None: the only task on this node."""
    fault: FaultSpec


class IterationStart(_Frame):
    ev: Literal["iter_start"] = "iter_start"
    it: int
    t: float
    phase: str = "train"
    ep: int | None = None
    """The worker's epoch (None: the worker does not tag it)."""


class IterationEnd(_Frame):
    ev: Literal["iter_end"] = "iter_end"
    it: int
    t: float
    dur: float
    compute: float
    """Seconds until this rank's micro-batches were done (then it waits for its peers)."""
    mbs: int = 0
    phase: str = "train"
    ep: int | None = None
    tokens: int | None = None
    flops: float | None = None
    loss: float | None = None
    lr: float | None = None
    grad_norm: float | None = None


class MicroBatchDone(_Frame):
    """Global micro-batch ``idx`` of iteration ``it`` finished on this rank."""

    ev: Literal["mb"] = "mb"
    it: int
    idx: int
    t: float


class ComputeDone(_Frame):
    """All local micro-batches of ``it`` done: the rank now waits in the gradient all-reduce."""

    ev: Literal["sync"] = "sync"
    it: int | None
    t: float


class AwaitingOrder(_Frame):
    """The worker's collective failed; it keeps its state and waits for a transition order."""

    ev: Literal["await"] = "await"
    t: float
    ep: int | None = None


class TransitionDone(_Frame):
    """The first iteration of a new epoch completed: how the rank got there."""

    ev: Literal["transition"] = "transition"
    t: float
    ep: int | None = None
    report: TransitionReport


class CheckpointDone(_Frame):
    """A persistent checkpoint of the task is complete (sent by the rank that marked it the latest)."""

    ev: Literal["checkpoint"] = "checkpoint"
    t: float
    ep: int | None = None
    it: int
    path: str
    size_bytes: int


class Evaluated(_Frame):
    """The evaluation after iteration ``it`` measured ``loss`` on held-out data (mean per token)."""

    ev: Literal["eval"] = "eval"
    t: float
    ep: int | None = None
    it: int
    loss: float


class SlowPhase(_Frame):
    """A phase that is slow on purpose (checkpoint, evaluation) began or ended."""

    ev: Literal["phase"] = "phase"
    phase: str
    state: Literal["begin", "end"]
    t: float


class ExceptionRaised(_Frame):
    ev: Literal["exception"] = "exception"
    t: float
    type: str
    msg: str
    tb: str
    it: int | None = None
    in_collective: bool = False
    ep: int | None = None
    waiting: bool = False
    """The worker stays alive and waits for a transition order (elastic mode)."""


class TrainingDone(_Frame):
    ev: Literal["done"] = "done"
    t: float


HookEvent = Annotated[
    WorkerHello
    | SpareReady
    | DrillRequest
    | IterationStart
    | IterationEnd
    | MicroBatchDone
    | ComputeDone
    | AwaitingOrder
    | TransitionDone
    | CheckpointDone
    | Evaluated
    | SlowPhase
    | ExceptionRaised
    | TrainingDone,
    Field(discriminator="ev"),
]
"""Every frame a worker (or a spare, or the drill CLI) sends to the agent."""


# ---------------------------------------------------------------------------------- agent → worker
class TransitionOrder(_Frame):
    """Move to the epoch of ``assignment`` (its rank, world and layout) without restarting."""

    order: Literal["transition"] = "transition"
    kind: str
    """The transition's kind (restart, shrink, grow, ...), for the worker's log."""
    assignment: WorkerAssignment


class FaultOrder(_Frame):
    """Arm a drill fault in the worker."""

    order: Literal["fault"] = "fault"
    fault: FaultSpec


class AssignOrder(_Frame):
    """A warm spare becomes a rank's worker: its per-rank environment and log file."""

    order: Literal["assign"] = "assign"
    env: dict[str, str]
    log: str = ""


HookOrder = Annotated[TransitionOrder | FaultOrder | AssignOrder, Field(discriminator="order")]
"""Every frame the agent sends to a worker or a spare."""


class DrillAnswer(_Frame):
    """The agent's answer to a :class:`DrillRequest`."""

    ok: bool
    detail: str


_EVENTS: TypeAdapter[HookEvent] = TypeAdapter(HookEvent)
_ORDERS: TypeAdapter[HookOrder] = TypeAdapter(HookOrder)


def _describe(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'frame'}: {e['msg']}" for e in exc.errors(include_url=False)
    )


def decode_event(line: bytes | str) -> HookEvent:
    """One worker → agent frame; :class:`HookProtocolError` names what is wrong with a bad one."""
    try:
        return _EVENTS.validate_json(line)
    except ValidationError as exc:
        raise HookProtocolError(f"bad hook event {_excerpt(line)}: {_describe(exc)}") from None


def decode_order(line: bytes | str) -> HookOrder:
    """One agent → worker frame; :class:`HookProtocolError` names what is wrong with a bad one."""
    try:
        return _ORDERS.validate_json(line)
    except ValidationError as exc:
        raise HookProtocolError(f"bad hook order {_excerpt(line)}: {_describe(exc)}") from None


def encode(frame: BaseModel) -> bytes:
    """A frame as one line of the hook socket."""
    return frame.model_dump_json(exclude_none=False).encode() + b"\n"


def _excerpt(line: bytes | str, limit: int = 120) -> str:
    text = line.decode(errors="replace") if isinstance(line, bytes) else line
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")
