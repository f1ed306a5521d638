"""Fuzzing the real agent-link consumer (the ASGI application, Redis, PostgreSQL) with protocol-shaped
frames whose fields are replaced by hostile values (non-finite and huge numbers, NUL characters,
oversized strings, wrong types, another node's task), and with raw garbage: the link is never closed
(a bad frame gets a ``protocol_error``) and no state about the task changes (it runs on another node)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.apps.fleet.models import AgentCommand, Device, Node
from controlplane.apps.fleet.services import DeviceSpec, do_register_node
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.config.asgi import application
from controlplane.core.protocol import PROTOCOL_VERSION
from tests.controlplane.factories import TaskFactory
from tests.e2e.conftest import hello_message, unique_name

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

EXAMPLES = 40
"""Links opened, each with up to 12 frames: about 20-40 s here."""

HOSTILE = st.one_of(
    st.just(float("inf")),
    st.just(float("-inf")),
    st.just(float("nan")),
    st.floats(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**31 - 1, 2**31, 2**63 - 1, 2**63, 10**30, -1]),
    st.text(max_size=40),
    st.text(max_size=20).map(lambda s: s + "\x00"),
    st.just("x" * 300_000),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)


def _report(task: int, event: dict[str, Any]) -> dict[str, Any]:
    now = datetime.now(UTC).isoformat()
    return {
        "type": "worker_report",
        "report_id": str(uuid.uuid4()),
        "task_id": str(task),
        "epoch": 1,
        "rank": 0,
        "device": 0,
        "detector": None,
        "occurred_at": now,
        "detected_at": now,
        "event": event,
    }


EVENTS: list[dict[str, Any]] = [
    {
        "kind": "iteration_stats",
        "first_iteration": 1,
        "last_iteration": 10**15,
        "iterations": 2,
        "median_s": 0.5,
        "max_s": 0.6,
        "compute_median_s": 0.4,
        "micro_batches": 8,
        "tokens": 2048,
        "model_flops": 8e9,
        "loss": 2.5,
    },
    {"kind": "exited", "exit_code": 0, "signal": None, "signal_name": None, "expected": True},
    {"kind": "exited", "exit_code": -9, "signal": 9, "signal_name": "SIGKILL", "expected": False},
    {"kind": "exception", "exc_type": "RuntimeError", "message": "CUDA error", "traceback": "tb"},
    {"kind": "transition", "from_epoch": 0, "iteration": 10**15, "in_place": False, "source": "none"},
    {
        "kind": "hang",
        "iteration": 3,
        "elapsed_s": 9.0,
        "threshold_s": 1.0,
        "median_iteration_s": 0.5,
        "phase": "train",
        "stack": "",
    },
]


@st.composite
def messages(draw: st.DrawFn, task: int) -> dict[str, Any]:
    """A protocol message about ``task`` with one field (of the message or its event) made hostile."""
    kind = draw(st.sampled_from(["report", "heartbeat", "ack"]))
    if kind == "report":
        msg = _report(task, dict(draw(st.sampled_from(EVENTS))))
        target = msg["event"] if draw(st.booleans()) else msg
    elif kind == "heartbeat":
        snap = {
            "task_id": str(task),
            "epoch": 1,
            "iteration": 4,
            "ranks": [0],
            "origin_node": "x",
            "nbytes": 1,
        }
        msg = {"type": "heartbeat", "uptime_s": 1.0, "snapshots": [snap]}
        target = snap if draw(st.booleans()) else msg
    else:
        msg = {"type": "ack", "command_id": str(uuid.uuid4()), "outcome": "done", "detail": ""}
        target = msg
    key = draw(st.sampled_from(sorted(k for k in target if k not in ("type", "kind"))))
    target[key] = draw(HOSTILE)
    return msg


def frames(task: int) -> st.SearchStrategy[str | bytes]:
    envelope_field = st.sampled_from(["seq", "session", "sent_at", "protocol_version"])

    def wrap(msg: dict[str, Any], field: str | None, value: Any) -> str:
        env: dict[str, Any] = {
            "protocol_version": PROTOCOL_VERSION,
            "node": "{node}",
            "session": "s-fuzz",
            "seq": "{seq}",  # the next one, unless the seq itself is fuzzed
            "sent_at": datetime.now(UTC).isoformat(),
            "message": msg,
        }
        if field is not None:
            env[field] = value
        return json.dumps(env)

    shaped = st.builds(
        wrap,
        messages(task),
        st.one_of(st.none(), envelope_field),
        HOSTILE,
    )
    garbage = st.one_of(
        st.binary(min_size=1, max_size=200),
        st.text(min_size=1, max_size=200),
        st.just("[" * 100_000 + "]" * 100_000),
        st.just(json.dumps({"message": {"type": ["hello"]}, "protocol_version": [1]})),
        st.just('{"protocol_version": 1, "seq": Infinity, "message": {"type": "heartbeat"}}'),
    )
    return st.one_of(shaped, shaped, garbage)


def _state(task: TrainingTask, node: Node) -> dict[str, Any]:
    t = TrainingTask.objects.get(pk=task.pk)
    return {
        "task": (t.iteration, t.state, t.epoch),
        "failures": FailureEvent.objects.count(),
        "samples": MetricSample.objects.count(),
        "allocations": sorted(
            Allocation.objects.filter(task=t).values_list("rank", "epoch", "active", "finished_at")
        ),
        "commands": AgentCommand.objects.count(),
        "snapshots": Node.objects.get(pk=node.pk).snapshots,
        "devices": sorted(Device.objects.filter(node=node).values_list("index", "state")),
    }


async def _exchange(token: str, node: str, raw_frames: list[str | bytes]) -> tuple[int, bool]:
    """Send the frames on a fresh link; returns (replies, whether the link was closed)."""
    comm = WebsocketCommunicator(
        application, "/ws/agent/", headers=[(b"authorization", f"Bearer {token}".encode())]
    )
    connected, _ = await comm.connect(timeout=10)
    assert connected
    try:
        hello = {
            "protocol_version": PROTOCOL_VERSION,
            "node": node,
            "session": "s-fuzz",
            "seq": 0,
            "sent_at": datetime.now(UTC).isoformat(),
            "message": hello_message(1),
        }
        await comm.send_to(text_data=json.dumps(hello))
        for seq, raw in enumerate(raw_frames, start=1):
            if isinstance(raw, bytes):
                await comm.send_to(bytes_data=raw)
            else:
                text = raw.replace('"{node}"', json.dumps(node)).replace('"{seq}"', str(seq))
                await comm.send_to(text_data=text)
        marker = uuid.uuid4().hex
        await comm.send_to(text_data=json.dumps({"protocol_version": marker}))
        replies = 0
        while True:
            out = await comm.receive_output(timeout=30)
            if out["type"] == "websocket.close":
                return replies, True
            replies += 1
            if marker in out.get("text", ""):
                return replies, False
    finally:
        await comm.disconnect()


def test_hostile_frames_never_close_the_link_or_change_state() -> None:
    fuzzer, token = do_register_node(
        None, unique_name("fuzz"), devices=[DeviceSpec(index=0, kind="cpu-slot", memory_bytes=2**32)]
    )
    owner, _ = do_register_node(
        None, unique_name("owner"), devices=[DeviceSpec(index=0, kind="cpu-slot", memory_bytes=2**32)]
    )
    task: TrainingTask = TaskFactory(state="running", epoch=1, iteration=5, total_iterations=100)
    Allocation.objects.create(task=task, device=Device.objects.get(node=owner, index=0), rank=0, epoch=1)
    async_to_sync(_exchange)(token, fuzzer.name, [])  # the hello's inventory is the baseline
    before = _state(task, fuzzer)
    sent = 0

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
        database=None,
    )
    @given(st.lists(frames(task.pk), min_size=1, max_size=12))
    def run(raw_frames: list[str | bytes]) -> None:
        nonlocal sent
        replies, closed = async_to_sync(_exchange)(token, fuzzer.name, raw_frames)
        sent += len(raw_frames)
        assert not closed, f"the link was closed after {replies} replies to {raw_frames!r:.2000}"
        assert _state(task, fuzzer) == before

    run()
    assert sent >= EXAMPLES
