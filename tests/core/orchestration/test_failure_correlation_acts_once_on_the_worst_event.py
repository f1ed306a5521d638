"""Correlation (core.orchestration.correlation): one action per task and epoch, on the most severe
evidence; stale epochs ignored; node loss wins; suspect nodes make it wait."""

from __future__ import annotations

from controlplane.core.failures import Action
from controlplane.core.orchestration import FailureCandidate, correlate, recovery_action_for


def ev(
    i: int, sev: str, at: float, epoch: int | None = 3, node: str = "a", task: int | None = 7
) -> FailureCandidate:
    return FailureCandidate(event_id=i, severity=sev, detected_at=at, task_id=task, epoch=epoch, node=node)


def test_peer_connection_reset_gives_the_crash_action() -> None:
    reset = ev(1, "sev3", 10.00, node="b")  # the survivor's gloo error arrives first
    crash = ev(2, "sev2", 10.02)
    d = correlate(reset, task_epoch=3, group=[reset, crash])
    assert (d.kind, d.primary, d.severity, d.absorbed) == ("act", 2, "sev2", (1,))


def test_ties_go_to_the_earliest_event() -> None:
    a, b = ev(5, "sev2", 2.0), ev(4, "sev2", 1.0)
    assert correlate(a, task_epoch=3, group=[a, b]).primary == 4


def test_evidence_from_an_older_epoch_is_stale() -> None:
    old = ev(1, "sev1", 1.0, epoch=2)
    d = correlate(old, task_epoch=3, group=[])
    assert d.kind == "stale"
    assert d.primary is None


def test_other_epochs_in_the_group_are_not_absorbed() -> None:
    e, old = ev(1, "sev3", 1.0), ev(2, "sev1", 0.5, epoch=2)
    d = correlate(e, task_epoch=3, group=[e, old])
    assert (d.primary, d.severity, d.absorbed) == (1, "sev3", ())


def test_a_node_loss_takes_over() -> None:
    e = ev(1, "sev3", 1.0, node="b")
    lost = ev(9, "sev1", 3.0, epoch=None, node="a", task=None)
    d = correlate(e, task_epoch=3, group=[e], node_events=[lost])
    assert (d.kind, d.primary, d.absorbed) == ("handover", 9, (1,))


def test_waits_while_a_node_of_the_task_is_suspect_then_acts() -> None:
    e = ev(1, "sev3", 1.0, node="b")
    early = correlate(e, task_epoch=3, group=[e], suspect_nodes=["a"], waited_s=1.0, max_wait_s=5.0)
    assert early.kind == "defer"
    late = correlate(e, task_epoch=3, group=[e], suspect_nodes=["a"], waited_s=5.5, max_wait_s=5.0)
    assert (late.kind, late.primary) == ("act", 1)


def test_recovery_actions_of_transition_kinds() -> None:
    assert recovery_action_for("retry") is Action.RETRY_IN_PLACE
    assert recovery_action_for("restart") is Action.RESTART_PROCESSES
    assert recovery_action_for("reconfigure") is Action.ISOLATE_AND_REPLAN


def test_an_exit_after_the_ranks_own_report_is_its_consequence() -> None:
    net = FailureCandidate(1, "sev3", 1.0, task_id=7, epoch=3, node="a", rank=1)
    exit17 = FailureCandidate(2, "sev2", 1.01, task_id=7, epoch=3, node="a", rank=1, is_exit=True)
    d = correlate(exit17, task_epoch=3, group=[net, exit17])
    assert (d.primary, d.severity, d.absorbed) == (1, "sev3", (2,))
    crash = FailureCandidate(3, "sev2", 0.99, task_id=7, epoch=3, node="b", rank=0, is_exit=True)
    d = correlate(net, task_epoch=3, group=[net, exit17, crash])
    assert (d.primary, d.severity) == (3, "sev2")  # another rank's crash is evidence of its own
