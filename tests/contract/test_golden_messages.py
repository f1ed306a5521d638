"""Every protocol message has a golden JSON sample that both sides accept and that the models reproduce."""

from __future__ import annotations

import json

import pytest

from controlplane.core.protocol import (
    AgentEnvelope,
    CoordinatorEnvelope,
    ProtocolViolation,
    agent_message_types,
    coordinator_message_types,
    decode_agent_frame,
    decode_coordinator_frame,
)
from tests.contract.samples import GOLDEN_DIR, SAMPLES, golden_path

AGENT_SAMPLES = sorted(n for n, e in SAMPLES.items() if isinstance(e, AgentEnvelope))
COORD_SAMPLES = sorted(n for n, e in SAMPLES.items() if isinstance(e, CoordinatorEnvelope))
ONE_WAY = lambda names: [n for n in names if not n.startswith("protocol_error")]  # noqa: E731


def test_every_message_type_has_a_golden_sample() -> None:
    agent_types = {SAMPLES[n].message.type for n in AGENT_SAMPLES}
    coord_types = {SAMPLES[n].message.type for n in COORD_SAMPLES}
    assert agent_types == set(agent_message_types())
    assert coord_types == set(coordinator_message_types())


def test_every_worker_event_kind_has_a_golden_sample() -> None:
    kinds = {SAMPLES[n].message.event.kind for n in AGENT_SAMPLES if n.startswith("worker_report.")}  # type: ignore[union-attr]
    assert kinds == {
        "started",
        "exited",
        "exception",
        "iteration_stats",
        "hang",
        "straggler",
        "transition",
        "checkpoint_saved",
    }


def test_no_stray_golden_files() -> None:
    assert {p.stem for p in GOLDEN_DIR.glob("*.json")} == set(SAMPLES)


@pytest.mark.parametrize("name", AGENT_SAMPLES)
def test_agent_golden_is_accepted_by_the_coordinator_decoder(name: str) -> None:
    raw = golden_path(name).read_text()
    env = decode_agent_frame(raw)
    assert env == SAMPLES[name]
    assert json.loads(env.model_dump_json()) == json.loads(raw)


@pytest.mark.parametrize("name", COORD_SAMPLES)
def test_coordinator_golden_is_accepted_by_the_agent_decoder(name: str) -> None:
    raw = golden_path(name).read_text()
    env = decode_coordinator_frame(raw)
    assert env == SAMPLES[name]
    assert json.loads(env.model_dump_json()) == json.loads(raw)


@pytest.mark.parametrize("name", ONE_WAY(AGENT_SAMPLES))
def test_agent_golden_is_refused_in_the_wrong_direction(name: str) -> None:
    with pytest.raises(ProtocolViolation) as info:
        decode_coordinator_frame(golden_path(name).read_text())
    assert info.value.error.code == "unknown_type"


@pytest.mark.parametrize("name", ONE_WAY(COORD_SAMPLES))
def test_coordinator_golden_is_refused_in_the_wrong_direction(name: str) -> None:
    with pytest.raises(ProtocolViolation) as info:
        decode_agent_frame(golden_path(name).read_text())
    assert info.value.error.code == "unknown_type"
