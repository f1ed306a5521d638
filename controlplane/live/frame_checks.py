"""What the agent link checks about a frame before any of it is stored: who sent it (the bearer token
of the handshake) and where it stands in its session (sequence, hello first, a hello's devices)."""

from __future__ import annotations

import re
from typing import Any, cast

from controlplane.core.protocol import AgentEnvelope, Hello, ProtocolError

_BEARER = re.compile(r"^Bearer\s+(\S+)\s*$", re.IGNORECASE)


def bearer_token(scope: dict[str, Any]) -> str | None:
    """The token of the handshake's ``Authorization: Bearer`` header; None when missing or malformed."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            match = _BEARER.match(value.decode("latin-1"))
            return match.group(1) if match else None
    return None


def check_frame_order(
    envelope: AgentEnvelope, session: str | None, last_seq: int | None
) -> ProtocolError | None:
    """Why the frame cannot be taken in its session (None: it can). ``session``: the link's session so
    far (None before its hello); ``last_seq``: the sequence number of the link's previous frame."""
    mtype = envelope.message.type
    new_session = mtype == "hello" and envelope.session != session
    if last_seq is not None and envelope.seq <= last_seq and not new_session:
        return ProtocolError(
            code="out_of_order",
            detail=f"seq {envelope.seq} is not above the previous frame's {last_seq}",
            in_reply_to_seq=envelope.seq,
        )
    if session is None and mtype != "hello":
        return ProtocolError(
            code="invalid", detail=f"the first frame must be hello, got {mtype}", in_reply_to_seq=envelope.seq
        )
    if mtype == "hello":
        hello = cast(Hello, envelope.message)
        if len({d.index for d in hello.devices}) != len(hello.devices):
            return ProtocolError(
                code="invalid", detail="hello: device indexes must be unique", in_reply_to_seq=envelope.seq
            )
    return None
