"""The spare zygote's pipes carry typed frames (agents.training.zygote_protocol): a malformed frame is
refused with an error naming the field, every frame survives its encoding, and the agent gives up a
zygote whose answer is malformed, saying why (it starts fresh spare processes from then on)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from agents.training.zygote_protocol import (
    Forked,
    ForkFailed,
    ForkRequest,
    ZygoteAnswer,
    ZygoteProtocolError,
    ZygoteReady,
    decode_answer,
    decode_request,
    encode,
)
from agents.zygote_link import ZygoteError, ZygoteLink


def test_a_fork_request_without_its_log_is_refused_naming_the_field() -> None:
    with pytest.raises(ZygoteProtocolError, match=r"bad zygote request .*log: Field required"):
        decode_request(b'{"op": "fork"}')


def test_an_answer_with_a_bad_field_is_refused_naming_it() -> None:
    with pytest.raises(ZygoteProtocolError, match=r"forked\.pid: Input should be a valid integer"):
        decode_answer(b'{"answer": "forked", "pid": "x"}')
    with pytest.raises(ZygoteProtocolError, match=r"ready\.ready_s: Input should be greater than"):
        decode_answer(b'{"answer": "ready", "ready_s": -1, "pid": 7}')
    with pytest.raises(ZygoteProtocolError, match=r"ready\.surplus: Extra inputs are not permitted"):
        decode_answer(b'{"answer": "ready", "ready_s": 1, "pid": 7, "surplus": 1}')


def test_an_unknown_answer_and_a_frame_that_is_not_json_are_refused() -> None:
    with pytest.raises(ZygoteProtocolError, match="does not match any of the expected tags"):
        decode_answer(b'{"answer": "spawned", "pid": 7}')
    with pytest.raises(ZygoteProtocolError, match="bad zygote answer 'not json'"):
        decode_answer(b"not json")
    with pytest.raises(ZygoteProtocolError, match=r"op: Input should be 'fork'"):
        decode_request(b'{"op": "exec", "log": "/tmp/x"}')


def test_the_fork_request_round_trips_through_its_encoding() -> None:
    request = ForkRequest(log="/run/spare-3.log")
    assert decode_request(encode(request)) == request
    with pytest.raises(ZygoteProtocolError):
        decode_answer(encode(request))  # a request is no answer


@pytest.mark.parametrize(
    "answer",
    [
        ZygoteReady(ready_s=3.25, pid=41, rss_kb=512_000),
        Forked(pid=42),
        ForkFailed(error="RuntimeError: 2 threads"),
    ],
    ids=["ready", "forked", "error"],
)
def test_each_answer_round_trips_through_its_encoding(answer: ZygoteAnswer) -> None:
    line = encode(answer)
    assert line.count(b"\n") == 1
    assert line.endswith(b"\n")
    assert decode_answer(line) == answer
    with pytest.raises(ZygoteProtocolError):
        decode_request(line)  # an answer is no request


def test_the_protocol_and_the_agents_side_import_without_torch() -> None:
    probe = "import sys, agents.zygote_link, agents.training.zygote_protocol; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def _link_to(tmp_path: Path, script: str) -> ZygoteLink:
    """A link whose 'zygote' is a stand-in process that says ``script``'s lines."""
    link = ZygoteLink(tmp_path, {}, lambda: None)
    link.proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    return link


async def test_the_agent_gives_up_a_zygote_whose_ready_answer_is_malformed_naming_the_field(
    tmp_path: Path,
) -> None:
    link = await _link_to(tmp_path, 'print(\'{"answer": "ready", "pid": 7}\', flush=True)')
    try:
        assert not await link.wait_ready()
        assert link.state == "gone"
        assert "ready.ready_s: Field required" in link.why_gone
    finally:
        await link.close()


async def test_a_malformed_fork_answer_gives_the_zygote_up_naming_the_field(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        'print(\'{"answer": "ready", "ready_s": 0.5, "pid": 7}\', flush=True)\n'
        "sys.stdin.readline()\n"
        'print(\'{"answer": "forked"}\', flush=True)\n'
        "sys.stdin.readline()\n"
    )
    link = await _link_to(tmp_path, script)
    try:
        assert await link.wait_ready()
        assert link.ready_s == 0.5
        with pytest.raises(ZygoteError, match=r"forked\.pid: Field required"):
            await link.fork(tmp_path / "spare.log")
        assert link.state == "gone"
    finally:
        await link.close()
