from controlplane.core.failures import (
    Action,
    DetectorKind,
    EscalationPolicy,
    Evidence,
    FailureRecord,
    Severity,
    classify,
    reclassify,
    should_quarantine,
)

RESET = Evidence(
    DetectorKind.EXCEPTION, exception_type="ConnectionResetError", node="n1", device=0, occurred_at=100.0
)
CUDA = Evidence(
    DetectorKind.EXCEPTION,
    exception_type="RuntimeError",
    message="CUDA error: an illegal memory access",
    node="n1",
    device=3,
    occurred_at=100.0,
)
OOM = Evidence(
    DetectorKind.EXCEPTION,
    exception_type="OutOfMemoryError",
    message="CUDA out of memory",
    node="n1",
    device=3,
    occurred_at=100.0,
)


def _at(ev: Evidence, t: float, **kw: object) -> Evidence:
    from dataclasses import replace

    return replace(ev, occurred_at=t, **kw)  # type: ignore[arg-type]


def test_a_sev3_whose_retry_failed_becomes_sev2() -> None:
    c = classify(_at(RESET, 100.0, during_recovery=Action.RETRY_IN_PLACE))
    assert c.severity is Severity.SEV2
    assert c.escalated_from is Severity.SEV3
    assert "retry in place failed" in c.reason


def test_a_failed_restart_becomes_sev1() -> None:
    c = classify(_at(CUDA, 100.0, during_recovery=Action.RESTART_PROCESSES))
    assert c.severity is Severity.SEV1
    assert c.action is Action.ISOLATE_AND_REPLAN


def test_a_sev2_recurring_on_the_same_device_within_the_window_becomes_sev1() -> None:
    first = FailureRecord(CUDA, classify(CUDA))
    again = classify(_at(CUDA, 200.0), [first])
    assert again.severity is Severity.SEV1
    other_device = classify(_at(CUDA, 200.0, device=4), [first])
    assert other_device.severity is Severity.SEV2
    much_later = classify(_at(CUDA, 100.0 + EscalationPolicy().recurrence_window_s + 1), [first])
    assert much_later.severity is Severity.SEV2


def test_repeated_out_of_memory_never_isolates_the_node() -> None:
    hist = [FailureRecord(_at(OOM, t), classify(_at(OOM, t))) for t in (1.0, 2.0, 3.0)]
    assert classify(_at(OOM, 4.0), hist).severity is Severity.SEV2
    assert classify(_at(OOM, 4.0, during_recovery=Action.RESTART_PROCESSES), hist).severity is Severity.SEV2


def test_repeated_hangs_on_one_node_escalate_to_restart() -> None:
    hang = Evidence(DetectorKind.HANG, node="n1", device=0)
    records = reclassify([_at(hang, t) for t in (10.0, 20.0, 30.0)])
    assert [r.classification.severity for r in records] == [Severity.SEV3, Severity.SEV3, Severity.SEV2]


def test_a_node_with_repeated_sev1_is_quarantined_and_one_sev1_is_not() -> None:
    xid = Evidence(
        DetectorKind.EXCEPTION, message="Xid 48: DBE (double bit error)", node="n7", occurred_at=0.0
    )
    one = reclassify([xid])
    assert should_quarantine("n7", one, now=10.0)[0] is False
    two = reclassify([xid, _at(xid, 3600.0)])
    quarantined, why = should_quarantine("n7", two, now=3700.0)
    assert quarantined
    assert "2 sev1" in why
    assert should_quarantine("n8", two, now=3700.0)[0] is False


def test_reclassifying_stored_evidence_is_deterministic_and_order_independent() -> None:
    evs = [
        _at(CUDA, 300.0),
        _at(RESET, 50.0),
        _at(CUDA, 100.0),
        _at(RESET, 60.0, during_recovery=Action.RETRY_IN_PLACE),
    ]
    a = reclassify(evs)
    b = reclassify(list(reversed(evs)))
    assert a == b
    assert [r.evidence.occurred_at for r in a] == [50.0, 60.0, 100.0, 300.0]
    assert [r.classification.severity for r in a] == [
        Severity.SEV3,
        Severity.SEV2,
        Severity.SEV2,
        Severity.SEV1,
    ]
