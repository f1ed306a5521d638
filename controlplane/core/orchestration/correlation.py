"""Failure correlation (docs/ARCHITECTURE.md §7.2): one action per task and epoch, on the most severe
evidence.

One fault produces several reports: a crashed rank (sev2, process supervision) makes its peers fail
their collective a few milliseconds later ("connection reset", sev3); a lost node (sev1, node health,
seconds later) makes the peers on other nodes report connection errors first. Acting on each report
would retry, restart and re-plan the same task three times. So the failure handler:

1. ignores evidence from an older epoch of the task (fencing: the task already moved on);
2. hands over to an unhandled **node-level** sev1 event on one of the task's nodes (the node's
   isolation and the re-plan cover every task on it);
3. **defers** while one of the task's nodes is suspect (its link dropped, the node health watchdog
   has not decided yet), up to ``max_wait_s``: a node loss must win over the peers' connection errors;
4. otherwise acts once, on the highest severity among the task's unhandled events at that epoch
   (ties: the earliest detected), and marks the others as absorbed by it. A rank's *exit* is not
   evidence of its own when the same rank reported why first (an exception forwarded by the hook, a
   hang verdict after which the agent killed it): the exit is the consequence, so a network error
   (sev3) followed by the worker's exit code stays a sev3, not a "worker exited" sev2.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from controlplane.core.failures import Action

SEVERITY_RANK: dict[str, int] = {"sev1": 3, "sev2": 2, "sev3": 1}


@dataclass(frozen=True, slots=True)
class FailureCandidate:
    """An unhandled failure event as the correlator sees it."""

    event_id: int
    severity: str
    detected_at: float
    task_id: int | None = None
    epoch: int | None = None
    node: str | None = None
    rank: int | None = None
    is_exit: bool = False
    """Process supervision saw the rank exit (as opposed to a reason reported by the rank / monitor)."""


DecisionKind = Literal["act", "defer", "stale", "handover"]


@dataclass(frozen=True, slots=True)
class CorrelatedAction:
    """What failure handling does with a task's open events: act on the worst, defer, drop as stale, or
    hand over."""

    kind: DecisionKind
    primary: int | None
    """The event acted on (``act``) or handed over to (``handover``)."""
    severity: str | None
    absorbed: tuple[int, ...]
    """Other events handled by the same action."""
    reason: str


def _key(c: FailureCandidate) -> tuple[int, float, int]:
    return (-SEVERITY_RANK.get(c.severity, 0), c.detected_at, c.event_id)


def correlate(
    event: FailureCandidate,
    *,
    task_epoch: int | None,
    group: Sequence[FailureCandidate],
    node_events: Sequence[FailureCandidate] = (),
    suspect_nodes: Sequence[str] = (),
    waited_s: float = 0.0,
    max_wait_s: float = 0.0,
) -> CorrelatedAction:
    """Decide what to do about ``event``.

    ``group``: the task's unhandled events at ``task_epoch`` (``event`` included or not);
    ``node_events``: unhandled node-level sev1 events on the task's nodes; ``suspect_nodes``: the task's
    nodes whose health is in doubt.
    """
    if event.epoch is not None and task_epoch is not None and event.epoch < task_epoch:
        return CorrelatedAction(
            "stale", None, None, (event.event_id,), f"epoch {event.epoch} < task epoch {task_epoch}"
        )
    members = {c.event_id: c for c in group if c.epoch is None or c.epoch == task_epoch}
    members.setdefault(event.event_id, event)
    if node_events:
        node = min(node_events, key=_key)
        absorbed = tuple(sorted(i for i in members if i != node.event_id))
        return CorrelatedAction(
            "handover", node.event_id, node.severity, absorbed, f"node event {node.event_id} on {node.node}"
        )
    if suspect_nodes and waited_s < max_wait_s:
        return CorrelatedAction(
            "defer",
            None,
            None,
            (),
            f"node(s) {', '.join(sorted(suspect_nodes))} suspect: waiting for the health verdict",
        )
    explained = {(c.node, c.rank) for c in members.values() if not c.is_exit and c.rank is not None}
    evidence = [c for c in members.values() if not (c.is_exit and (c.node, c.rank) in explained)]
    primary = min(evidence or list(members.values()), key=_key)
    absorbed = tuple(sorted(i for i in members if i != primary.event_id))
    return CorrelatedAction(
        "act",
        primary.event_id,
        primary.severity,
        absorbed,
        f"{primary.severity} is the most severe of {len(members)} event(s)",
    )


RECOVERY_ACTIONS: dict[str, Action] = {
    "retry": Action.RETRY_IN_PLACE,
    "restart": Action.RESTART_PROCESSES,
    "reconfigure": Action.ISOLATE_AND_REPLAN,
    "launch": Action.ISOLATE_AND_REPLAN,
    "suspend": Action.ISOLATE_AND_REPLAN,
}


def recovery_action_for(transition_kind: str) -> Action:
    """The core action a transition of this kind carries out (``Evidence.during_recovery``)."""
    return RECOVERY_ACTIONS[transition_kind]
