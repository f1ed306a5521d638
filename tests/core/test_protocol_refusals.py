"""Frames that cannot be accepted are refused with a ProtocolError that names the problem."""

from __future__ import annotations

import json

import pytest

from controlplane.core.protocol import ProtocolViolation, decode_agent_frame, decode_coordinator_frame

HEARTBEAT = {
    "protocol_version": 1,
    "node": "node-a",
    "session": "s1",
    "seq": 4,
    "sent_at": "2025-01-01T00:00:00Z",
    "message": {"type": "heartbeat", "uptime_s": 1.0},
}


def _refusal(frame: object, decode=decode_agent_frame) -> ProtocolViolation:  # type: ignore[no-untyped-def]
    raw = frame if isinstance(frame, str | bytes) else json.dumps(frame)
    with pytest.raises(ProtocolViolation) as info:
        decode(raw)
    return info.value


def test_valid_heartbeat_is_accepted() -> None:
    env = decode_agent_frame(json.dumps(HEARTBEAT))
    assert env.message.type == "heartbeat"
    assert env.seq == 4


def test_unsupported_version_is_refused_with_the_supported_list() -> None:
    err = _refusal({**HEARTBEAT, "protocol_version": 2}).error
    assert err.code == "version_mismatch"
    assert "2" in err.detail
    assert err.supported_versions == [1]
    assert err.in_reply_to_seq == 4


def test_missing_version_is_a_version_mismatch() -> None:
    frame = {k: v for k, v in HEARTBEAT.items() if k != "protocol_version"}
    assert _refusal(frame).error.code == "version_mismatch"


def test_not_json_is_malformed() -> None:
    assert _refusal("{nope").error.code == "malformed"
    assert _refusal(b"\xff\xfe").error.code == "malformed"


def test_json_array_is_malformed() -> None:
    assert _refusal("[1, 2]").error.code == "malformed"


def test_unknown_type_names_the_type() -> None:
    err = _refusal({**HEARTBEAT, "message": {"type": "frobnicate"}}).error
    assert err.code == "unknown_type"
    assert "frobnicate" in err.detail


def test_invalid_field_names_the_field() -> None:
    err = _refusal({**HEARTBEAT, "message": {"type": "heartbeat", "uptime_s": -3}}).error
    assert err.code == "invalid"
    assert "uptime_s" in err.detail


def test_unknown_field_is_invalid() -> None:
    err = _refusal({**HEARTBEAT, "message": {"type": "heartbeat", "uptime_s": 1, "colour": "red"}}).error
    assert err.code == "invalid"
    assert "colour" in err.detail


def test_command_without_epoch_is_invalid_on_the_agent_side() -> None:
    frame = {
        **HEARTBEAT,
        "node": "coordinator",
        "message": {"type": "stop_workers", "command_id": "c1", "task_id": "t"},
    }
    err = _refusal(frame, decode_coordinator_frame).error
    assert err.code == "invalid"
    assert "epoch" in err.detail
