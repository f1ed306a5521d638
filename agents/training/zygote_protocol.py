"""The spare zygote's protocol: what the agent asks its zygote and what the zygote answers.

One JSON object per line on the zygote's pipes (:mod:`agents.training.zygote`, the agent's side in
:mod:`agents.zygote_link`). Agent → zygote frames are :data:`ZygoteRequest` (discriminated by ``op``);
zygote → agent frames are :data:`ZygoteAnswer` (discriminated by ``answer``):

- the zygote says :class:`ZygoteReady` once its imports are done;
- for each :class:`ForkRequest` it forks a spare and answers :class:`Forked` (or :class:`ForkFailed`).

Both sides decode a line once (:func:`decode_request`, :func:`decode_answer`); a malformed frame raises
:class:`ZygoteProtocolError` naming the field that is wrong. This module imports pydantic only (no torch):
the agent imports it without the zygote's imports.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError


class ZygoteProtocolError(ValueError):
    """A zygote pipe frame that is not valid JSON or not a known, well-formed message."""


class _Frame(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------------------------- agent → zygote
class ForkRequest(_Frame):
    """Fork a warm spare whose stdout and stderr go to ``log``."""

    op: Literal["fork"] = "fork"
    log: str


ZygoteRequest = ForkRequest
"""Every agent → zygote frame (one kind so far)."""


# ---------------------------------------------------------------------------------- zygote → agent
class ZygoteReady(_Frame):
    """The zygote's imports are done: it forks spares from now on."""

    answer: Literal["ready"] = "ready"
    ready_s: float = Field(ge=0)
    """Seconds its imports took."""
    pid: int
    rss_kb: int = 0


class Forked(_Frame):
    """A spare was forked; it is (or soon is) the agent's child."""

    answer: Literal["forked"] = "forked"
    pid: int


class ForkFailed(_Frame):
    """The zygote refused or failed a fork (the agent then starts fresh spare processes)."""

    answer: Literal["error"] = "error"
    error: str


ZygoteAnswer = Annotated[ZygoteReady | Forked | ForkFailed, Field(discriminator="answer")]

_REQUESTS: TypeAdapter[ZygoteRequest] = TypeAdapter(ZygoteRequest)
_ANSWERS: TypeAdapter[ZygoteAnswer] = TypeAdapter(ZygoteAnswer)


def _describe(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'frame'}: {e['msg']}" for e in exc.errors(include_url=False)
    )


def _excerpt(line: bytes | str, limit: int = 120) -> str:
    text = line.decode(errors="replace") if isinstance(line, bytes) else line
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")


def decode_request(line: bytes | str) -> ZygoteRequest:
    """One agent → zygote frame; :class:`ZygoteProtocolError` names what is wrong with a bad one."""
    try:
        return _REQUESTS.validate_json(line)
    except ValidationError as exc:
        raise ZygoteProtocolError(f"bad zygote request {_excerpt(line)}: {_describe(exc)}") from None


def decode_answer(line: bytes | str) -> ZygoteAnswer:
    """One zygote → agent frame; :class:`ZygoteProtocolError` names what is wrong with a bad one."""
    try:
        return _ANSWERS.validate_json(line)
    except ValidationError as exc:
        raise ZygoteProtocolError(f"bad zygote answer {_excerpt(line)}: {_describe(exc)}") from None


def encode(frame: ZygoteRequest | ZygoteAnswer) -> bytes:
    """A frame as one line of the zygote's pipes."""
    return frame.model_dump_json().encode() + b"\n"
