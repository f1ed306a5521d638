"""A malformed hook socket frame is refused with an error that names what is wrong; the link stays up."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from agents.supervisor import Supervisor
from agents.training.hook_protocol import (
    DrillAnswer,
    DrillRequest,
    HookProtocolError,
    IterationEnd,
    TransitionOrder,
    decode_event,
    decode_order,
    encode,
)
from controlplane.core.protocol import FaultSpec


def test_an_event_missing_a_field_is_refused_naming_the_field() -> None:
    with pytest.raises(HookProtocolError, match=r"iter_end\.dur: Field required"):
        decode_event(b'{"ev": "iter_end", "it": 3, "t": 1.0, "compute": 0.5}')


def test_an_unknown_event_and_a_frame_that_is_not_json_are_refused() -> None:
    with pytest.raises(HookProtocolError, match="does not match any of the expected tags"):
        decode_event(b'{"ev": "iter_middle", "it": 3}')
    with pytest.raises(HookProtocolError, match="bad hook event 'not json'"):
        decode_event(b"not json")


def test_an_order_with_a_bad_assignment_is_refused_naming_the_field() -> None:
    with pytest.raises(HookProtocolError, match=r"transition\.assignment\.rank"):
        decode_order(b'{"order": "transition", "kind": "shrink", "assignment": {"rank": "x"}}')


def test_frames_round_trip_through_their_encoding() -> None:
    end = IterationEnd(it=4, t=2.0, dur=0.1, compute=0.08, mbs=2, ep=1, tokens=64, flops=1e9, loss=2.5)
    assert decode_event(encode(end)) == end
    with pytest.raises(HookProtocolError):
        decode_order(encode(end))
    assert TransitionOrder.model_fields["order"].default == "transition"


async def test_the_agent_refuses_a_bad_frame_by_name_and_keeps_serving_the_connection(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sup = Supervisor(lambda report: None, worker_kind="sim", run_dir=tmp_path)
    sup.drill = lambda task_id, fault: f"{fault.kind} for {task_id}"
    await sup.start()
    try:
        reader, writer = await asyncio.open_unix_connection(str(sup.socket_path))
        with caplog.at_level(logging.WARNING, logger="agents.supervisor"):
            writer.write(b'{"ev": "spare", "ready_s": 1.5}\n')  # no pid
            writer.write(encode(DrillRequest(task_id="t", fault=FaultSpec(kind="hang", rank=0))))
            await writer.drain()
            answer = DrillAnswer.model_validate_json(await asyncio.wait_for(reader.readline(), 10))
        writer.close()
        assert answer == DrillAnswer(ok=True, detail="hang for t")
        refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert len(refused) == 1, refused
        assert "spare.pid: Field required" in refused[0]
    finally:
        await sup.close()
