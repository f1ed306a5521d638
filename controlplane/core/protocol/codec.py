"""Decoding and encoding frames, with clear refusals instead of crashes.

``decode_agent_frame`` is what the coordinator calls on every frame it receives;
``decode_coordinator_frame`` is what the agent calls. Both raise :class:`ProtocolViolation`, whose
``error`` is the :class:`ProtocolError` message to send back; the caller logs it, replies, and keeps
the link open.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from controlplane.core.protocol.messages import (
    INT64_MAX,
    SUPPORTED_VERSIONS,
    AgentEnvelope,
    AgentMessage,
    CoordinatorEnvelope,
    CoordinatorMessage,
    ProtocolError,
    ProtocolErrorCode,
)

_E = TypeVar("_E", AgentEnvelope, CoordinatorEnvelope)

_AGENT_TYPES = frozenset(
    m.model_fields["type"].default
    for m in AgentEnvelope.model_fields["message"].annotation.__args__  # type: ignore[union-attr]
)
_COORDINATOR_TYPES = frozenset(
    m.model_fields["type"].default
    for m in CoordinatorEnvelope.model_fields["message"].annotation.__args__  # type: ignore[union-attr]
)

AGENT_MESSAGE_ADAPTER: TypeAdapter[Any] = TypeAdapter(AgentMessage)
COORDINATOR_MESSAGE_ADAPTER: TypeAdapter[Any] = TypeAdapter(CoordinatorMessage)


DETAIL_MAX = 4096
"""A refusal's detail is cut to this (it quotes the offending input)."""


class ProtocolViolation(Exception):
    """A frame could not be accepted; ``error`` is the reply to send."""

    def __init__(self, code: ProtocolErrorCode, detail: str, seq: int | None = None) -> None:
        detail = detail if len(detail) <= DETAIL_MAX else detail[: DETAIL_MAX - 1] + "…"
        seq = seq if seq is not None and 0 <= seq <= INT64_MAX else None
        super().__init__(f"{code}: {detail}")
        self.error = ProtocolError(code=code, detail=detail, in_reply_to_seq=seq)


def agent_message_types() -> frozenset[str]:
    return _AGENT_TYPES


def coordinator_message_types() -> frozenset[str]:
    return _COORDINATOR_TYPES


def _decode(raw: str | bytes, envelope: type[_E], known: frozenset[str], direction: str) -> _E:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ProtocolViolation("malformed", f"frame is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProtocolViolation("malformed", f"frame must be a JSON object, got {type(data).__name__}")
    seq = data.get("seq") if isinstance(data.get("seq"), int) else None
    version = data.get("protocol_version")
    if not isinstance(version, int) or version not in SUPPORTED_VERSIONS:
        raise ProtocolViolation(
            "version_mismatch",
            f"protocol_version {version!r} is not supported; supported: {sorted(SUPPORTED_VERSIONS)}",
            seq,
        )
    message = data.get("message")
    mtype = message.get("type") if isinstance(message, dict) else None
    if not isinstance(mtype, str) or mtype not in known:
        raise ProtocolViolation(
            "unknown_type",
            f"unknown {direction} message type {mtype!r}; expected one of {sorted(known)}",
            seq,
        )
    try:
        return envelope.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors(include_url=False)
        )
        raise ProtocolViolation("invalid", f"{mtype}: {problems}", seq) from None


def decode_agent_frame(raw: str | bytes) -> AgentEnvelope:
    """Coordinator side: parse a frame sent by an agent."""
    return _decode(raw, AgentEnvelope, _AGENT_TYPES, "agent")


def decode_coordinator_frame(raw: str | bytes) -> CoordinatorEnvelope:
    """Agent side: parse a frame sent by the coordinator."""
    return _decode(raw, CoordinatorEnvelope, _COORDINATOR_TYPES, "coordinator")


def encode(envelope: BaseModel) -> str:
    """Serialise an envelope to its JSON text (ISO-8601 datetimes, no None omission)."""
    return envelope.model_dump_json()
