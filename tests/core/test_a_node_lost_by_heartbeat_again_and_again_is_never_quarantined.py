"""A node whose heartbeats stopped (a crashed or frozen agent, a partition) is re-planned around, not
isolated: its losses are liveness verdicts, not evidence against it, and however many there are they
never quarantine it — alone or beside one real sev1 failure. Two real sev1 failures still do."""

from dataclasses import replace

from controlplane.core.failures import DetectorKind, Evidence, Severity, reclassify, should_quarantine

LOST = Evidence(DetectorKind.HEARTBEAT, node="n1", occurred_at=0.0)
XID = Evidence(DetectorKind.EXCEPTION, message="Xid 48: DBE (double bit error)", node="n1", occurred_at=0.0)


def test_a_lost_node_is_a_sev1_liveness_verdict() -> None:
    assert reclassify([LOST])[0].classification.severity is Severity.SEV1


def test_repeated_losses_never_quarantine_the_node() -> None:
    history = reclassify([replace(LOST, occurred_at=float(t)) for t in (10, 100, 200, 300)])
    quarantined, why = should_quarantine("n1", history, now=400.0)
    assert quarantined is False, why


def test_losses_beside_one_real_failure_do_not_quarantine_it() -> None:
    history = reclassify(
        [replace(LOST, occurred_at=10.0), replace(LOST, occurred_at=100.0), replace(XID, occurred_at=150.0)]
    )
    assert should_quarantine("n1", history, now=200.0)[0] is False


def test_two_real_sev1_failures_still_quarantine_it() -> None:
    history = reclassify(
        [replace(LOST, occurred_at=10.0), replace(XID, occurred_at=100.0), replace(XID, occurred_at=150.0)]
    )
    quarantined, why = should_quarantine("n1", history, now=200.0)
    assert quarantined
    assert "2 sev1" in why
