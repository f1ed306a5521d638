"""A collective that broke because a peer died says nothing about the node that saw it: such evidence
is a consequence, and only causes escalate or count toward quarantine."""

from dataclasses import replace

import pytest

from controlplane.core.failures import (
    Action,
    Blame,
    Classification,
    DetectorKind,
    Evidence,
    FailureRecord,
    Severity,
    classify,
    reclassify,
    should_quarantine,
)

PEER_RESET = Evidence(
    DetectorKind.EXCEPTION,
    exception_type="RuntimeError",
    message="[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.7]:4242",
    node="healthy",
    device=0,
)
CUDA = Evidence(
    DetectorKind.EXCEPTION,
    exception_type="RuntimeError",
    message="CUDA error: an illegal memory access was encountered",
    node="healthy",
    device=0,
)


def test_a_peer_closing_the_connection_is_a_consequence() -> None:
    assert classify(PEER_RESET).blame is Blame.CONSEQUENCE
    assert classify(CUDA).blame is Blame.CAUSE


def test_many_consequences_on_one_node_do_not_escalate() -> None:
    records = reclassify([replace(PEER_RESET, occurred_at=float(t)) for t in range(1, 10)])
    assert {r.classification.severity for r in records} == {Severity.SEV3}


def test_consequences_do_not_count_toward_a_cause_escalation() -> None:
    hang = Evidence(DetectorKind.HANG, node="healthy", device=0)
    history = reclassify([replace(PEER_RESET, occurred_at=float(t)) for t in (1, 2, 3)])
    assert classify(replace(hang, occurred_at=4.0), history).severity is Severity.SEV3
    crash_history = [
        FailureRecord(replace(CUDA, occurred_at=1.0), replace(classify(CUDA), blame=Blame.CONSEQUENCE))
    ]
    assert classify(replace(CUDA, occurred_at=2.0), crash_history).severity is Severity.SEV2


def test_a_consequence_seen_during_a_failed_restart_never_isolates_the_node() -> None:
    c = classify(replace(PEER_RESET, during_recovery=Action.RESTART_PROCESSES))
    assert c.severity is Severity.SEV2
    assert c.action is Action.RESTART_PROCESSES
    assert classify(replace(CUDA, during_recovery=Action.RESTART_PROCESSES)).severity is Severity.SEV1


def test_sev1_consequences_never_quarantine_a_node() -> None:
    sev1 = Classification(Severity.SEV1, Action.ISOLATE_AND_REPLAN, classify(PEER_RESET).category, "x", "y")
    records = [
        FailureRecord(replace(PEER_RESET, occurred_at=float(t)), replace(sev1, blame=Blame.CONSEQUENCE))
        for t in (1, 2, 3)
    ]
    assert should_quarantine("healthy", records, now=10.0)[0] is False
    causes = [replace(r, classification=sev1) for r in records]
    assert should_quarantine("healthy", causes, now=10.0)[0] is True


def test_evidence_and_classification_round_trip_through_json() -> None:
    ev = replace(CUDA, exit_code=1, occurred_at=12.5, during_recovery=Action.RETRY_IN_PLACE)
    assert Evidence.from_json(ev.to_json()) == ev
    c = classify(PEER_RESET)
    assert Classification.from_json(c.to_json()) == c


def test_malformed_stored_evidence_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="device"):
        Evidence.from_json({**CUDA.to_json(), "device": "zero"})
    with pytest.raises(ValueError, match=r"classification\.severity"):
        Classification.from_json({**classify(CUDA).to_json(), "severity": "sev9"})
    with pytest.raises(ValueError, match="detector"):
        Evidence.from_json({"message": "no detector"})
