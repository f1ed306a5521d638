"""Failure handling (docs/ARCHITECTURE.md §7.2): correlate a task's failure events, act once, escalate when
the action
fails, quarantine repeat offenders.

``incidents.handle_failure(event_id)`` runs this after a short settle window. Under the orchestration
lock it loads the task's unhandled events at the task's epoch and asks the pure correlator
(:func:`controlplane.core.orchestration.correlate`) what to do:

- sev3 → retry in place: every node of the task gets a ``RetryCommand`` (new epoch, new rendezvous);
- sev2 → restart on the same devices: ``ReconfigureCommand`` to every node (new epoch), survivors =
  the ranks that did not fail;
- sev1 → isolate the device (device evidence) or the node, re-plan every task (the precomputed plan
  when the state after the failure was foreseen), transitions;
- a failure of the task *during* its transition, a failed / rejected command or a timed-out step:
  the evidence is re-classified with ``during_recovery`` (the core escalates sev3 → sev2 → sev1) and
  the escalated event (``escalated_from``) is acted on. A chain of :data:`MAX_ESCALATIONS` failed
  recoveries fails the task (an operator must look).
"""

from __future__ import annotations

import logging
from contextlib import suppress
from dataclasses import dataclass, replace

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import Q
from django.utils import timezone

from controlplane.apps.common.triggers import request_failure_handling, request_replan
from controlplane.apps.fleet.choices import (
    DEVICE_MACHINE,
    NODE_MACHINE,
    CommandType,
    DeviceState,
    NodeState,
)
from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.fleet.services import (
    do_enqueue_command,
    do_quarantine_node,
    do_set_device_state,
    do_set_node_state,
)
from controlplane.apps.incidents.choices import Action, Detector, Severity
from controlplane.apps.incidents.claims import claim_handling, hold_claim, release_claim
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.incidents.selectors import (
    list_failure_history,
    reported_rank,
    reported_worker,
    stored_classification,
    stored_evidence,
)
from controlplane.apps.incidents.services import (
    FailureReport,
    do_raise_alert,
    do_record_failure_event,
    do_resolve_failure_event,
)
from controlplane.apps.planning.choices import PlanTrigger, TransitionKind, TransitionState
from controlplane.apps.planning.locking import orchestration_lock
from controlplane.apps.planning.models import Transition
from controlplane.apps.planning.replan import replan
from controlplane.apps.planning.restart import restart_in_place
from controlplane.apps.planning.stragglers import straggler_isolation_pays
from controlplane.apps.planning.transitions import fail_transition
from controlplane.apps.training.choices import TERMINAL_TASK_STATES, TaskState
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.apps.training.services import do_set_task_state
from controlplane.core import failures
from controlplane.core.orchestration import FailureCandidate, correlate, recovery_action_for

log = logging.getLogger(__name__)

MAX_ESCALATIONS = 3
DEFER_STEP_S = 0.5


@dataclass(frozen=True, slots=True)
class Handled:
    """What handling one failure event did: ``replanned`` when the cluster was re-planned (the
    precomputed decisions are then stale), ``note`` for the log."""

    note: str
    replanned: bool = False

    def __str__(self) -> str:
        return self.note


def _candidate(ev: FailureEvent) -> FailureCandidate:
    worker = reported_worker(ev)
    return FailureCandidate(
        event_id=ev.pk,
        severity=ev.severity,
        detected_at=ev.detected_at.timestamp(),
        task_id=ev.task_id,
        epoch=ev.task_epoch,
        node=ev.node.name if ev.node is not None else None,
        rank=worker.rank,
        is_exit=worker.kind == "exited",
    )


def _mark_handled(ev: FailureEvent, by: FailureEvent | None, resolve: bool = False) -> None:
    FailureEvent.objects.filter(pk=ev.pk, handled_at__isnull=True).update(
        handled_at=timezone.now(), handled_by=by
    )
    if resolve:
        do_resolve_failure_event(ev)


def _link(events: list[FailureEvent], t: Transition | None) -> None:
    if t is not None:
        FailureEvent.objects.filter(pk__in=[e.pk for e in events]).update(transition=t)


def handle_failure(event_id: int, waited_s: float = 0.0) -> Handled:
    """Act on failure event ``event_id`` (and the events correlated with it). Idempotent. Claimed while
    it runs (:mod:`controlplane.apps.incidents.claims`): a worker killed meanwhile does not lose it."""
    claim_handling(event_id)
    try:
        with transaction.atomic():
            hold_claim(event_id)
            handled = _handle_claimed(event_id)
            release_claim(event_id)  # handled, or deferred on purpose: nobody holds it any more
        return handled
    except Exception:
        with suppress(DatabaseError):  # a failed handling is retried by the transition watchdog, not at once
            release_claim(event_id)
        raise


def _handle_claimed(event_id: int) -> Handled:
    orchestration_lock()
    ev = (
        FailureEvent.objects.select_for_update(of=("self",), no_key=True)
        .select_related("node", "task")
        .filter(pk=event_id)
        .first()
    )
    if ev is None or ev.handled_at is not None:
        return Handled("already handled")
    if ev.action == Action.NONE:
        _mark_handled(ev, ev)
        return Handled("no action")
    if ev.task_id is None:
        return _handle_node_event(ev)
    # no row lock on the task here (the advisory lock serialises the orchestrator; the agent link
    # locks a transition step before the task row, so locking the task first could deadlock)
    task = TrainingTask.objects.get(pk=ev.task_id)
    if task.state in TERMINAL_TASK_STATES or task.state in (TaskState.PENDING, TaskState.SUSPENDED):
        _mark_handled(ev, None, resolve=True)
        return Handled(f"task {task.pk} is {task.state}: nothing to do")
    group = list(
        FailureEvent.objects.filter(task=task, task_epoch=task.epoch, handled_at__isnull=True)
        .exclude(action=Action.NONE)
        .select_related("node")
    )
    unusable = [e for e in [ev, *group] if failures.fails_the_task(stored_classification(e))]
    if unusable:
        return _fail_task(task, unusable[0], [ev, *group])
    tolerated = _tolerate_stragglers([e for e in group if e.kind == "straggler"], task)
    if ev.pk in tolerated:
        return Handled("straggler tolerated: running without its device is worth less")
    group = [e for e in group if e.pk not in tolerated]
    node_ids = set(
        Allocation.objects.filter(task=task, active=True).values_list("device__node_id", flat=True)
    )
    nodes = list(Node.objects.filter(pk__in=node_ids))
    node_events = list(
        FailureEvent.objects.filter(
            task__isnull=True, node_id__in=node_ids, severity=Severity.SEV1, handled_at__isnull=True
        ).select_related("node")
    )
    suspect = [n.name for n in nodes if n.state in (NodeState.SUSPECT, NodeState.LOST)]
    waited = (timezone.now() - ev.detected_at).total_seconds()
    decision = correlate(
        _candidate(ev),
        task_epoch=task.epoch,
        group=[_candidate(e) for e in group],
        node_events=[_candidate(e) for e in node_events],
        suspect_nodes=suspect,
        waited_s=waited,
        max_wait_s=float(settings.UNICRON_LOST_AFTER_S) + 2.0,
    )
    by_id = {e.pk: e for e in [*group, *node_events, ev]}
    if decision.kind == "stale":
        _mark_handled(ev, None, resolve=True)
        return Handled(decision.reason)
    if decision.kind == "defer":
        request_failure_handling(ev.pk, countdown=DEFER_STEP_S)
        return Handled(f"deferred: {decision.reason}")
    assert decision.primary is not None
    primary = by_id[decision.primary]
    absorbed = [by_id[i] for i in decision.absorbed if i in by_id]
    for other in absorbed:
        _mark_handled(other, primary)
    if decision.kind == "handover":
        request_failure_handling(primary.pk, countdown=0.0)
        return Handled(f"handed over to node event {primary.pk}")
    running = Transition.objects.filter(task=task, state=TransitionState.RUNNING, epoch=task.epoch).first()
    if running is not None and primary.task_epoch == task.epoch and running.kind != TransitionKind.SUSPEND:
        # the task failed again while it was being recovered: escalate (§5.2)
        fail_transition(
            running,
            f"the task failed again during the {running.kind}: {primary.summary}",
            primary.node,
            escalate=False,
        )
        escalated = escalate(primary, task, recovery_action_for(running.kind), "failed during recovery")
        _mark_handled(primary, escalated)
        for other in absorbed:
            FailureEvent.objects.filter(pk=other.pk).update(handled_by=escalated)
        if escalated is None:
            return Handled("task failed: too many escalations")
        primary, absorbed = escalated, [primary, *absorbed]
    return _act(primary, absorbed, task)


def _fail_task(task: TrainingTask, cause: FailureEvent, events: list[FailureEvent]) -> Handled:
    """A recipe no node can run (:data:`controlplane.core.failures.TASK_FAILURES`): the task fails once,
    with the worker's reason in the operator alert; its running transition fails without escalation,
    its events are resolved and its nodes stop its workers (and drop its snapshots)."""
    reason = stored_evidence(cause).message or cause.summary
    running = Transition.objects.filter(task=task, state=TransitionState.RUNNING).first()
    if running is not None:
        fail_transition(running, f"the task failed: {reason}", None, escalate=False)
    for e in events:
        _mark_handled(e, cause, resolve=True)
    nodes = list(
        Node.objects.filter(devices__allocations__task=task, devices__allocations__active=True).distinct()
    )
    task = do_set_task_state(task, TaskState.FAILED)
    for node in nodes:
        do_enqueue_command(
            node, CommandType.STOP_WORKERS, {"task": task.pk, "task_ended": True}, task.pk, task.epoch
        )
    do_raise_alert(
        Severity.SEV2, f"Task {task.name} (#{task.pk}) failed: {reason}"[:1000], source_event=cause, node=None
    )
    request_replan("task_finished")
    return Handled(f"task {task.pk} failed: {reason}")


def _tolerate_stragglers(events: list[FailureEvent], task: TrainingTask) -> set[int]:
    """Stragglers whose isolation does not pay (:func:`straggler_isolation_pays`) are kept: marked
    handled and resolved, with an operator alert. Returns their ids."""
    out: set[int] = set()
    for e in events:
        ratio = reported_worker(e).ratio
        if e.device_id is None or ratio is None:
            continue
        pays, why = straggler_isolation_pays(task, e.device_id, ratio)
        if pays:
            continue
        _mark_handled(e, e, resolve=True)
        FailureEvent.objects.filter(pk=e.pk).update(evidence={**(e.evidence or {}), "tolerated": why})
        where = f"{e.node.name if e.node else '?'}/device {e.device_id}"
        do_raise_alert(Severity.SEV2, f"Straggler on {where} of task {task.name} (#{task.pk}) kept: {why}", e)
        out.add(e.pk)
    return out


def _failed_ranks(events: list[FailureEvent]) -> set[int]:
    """The ranks whose process must be replaced: every rank with an event, except a rank whose every
    event says its worker is alive, kept its state and waits for an order (an elastic worker that saw
    a collective error, e.g. a peer's connection reset). Such a rank stays in place as a survivor,
    whatever severity its node's history gave the event; a process that then dies anyway reports
    again and the restart escalates."""
    failed: set[int] = set()
    for e in events:
        rank, waiting = reported_rank(e)
        if rank is not None and not waiting:
            failed.add(rank)
    return failed


def _act(primary: FailureEvent, absorbed: list[FailureEvent], task: TrainingTask) -> Handled:
    _mark_handled(primary, primary)
    everything = [primary, *absorbed]
    task.refresh_from_db()
    if primary.severity == Severity.SEV3:
        t = restart_in_place(task, primary, set(), TransitionKind.RETRY)
        if t is not None:
            _link(everything, t)
            return Handled(f"retry in place: transition {t.pk}")
    elif primary.severity == Severity.SEV2:
        # Only the ranks whose process is gone (or must go) restart; a rank that reported a collective
        # error and waits (a peer seeing the failure) stays in place as a survivor.
        failed = _failed_ranks(everything)
        t = restart_in_place(task, primary, failed, TransitionKind.RESTART)
        if t is not None:
            _link(everything, t)
            return Handled(f"restart on the same devices: transition {t.pk}")
    elif _blames_the_hardware(primary):
        isolate(primary)
        check_quarantine(primary.node)
    decision = replan(PlanTrigger.FAILURE, primary, hit_tasks=[task.pk])
    mine = [t for t in decision.transitions if t.task_id == task.pk]
    _link(everything, mine[0] if mine else None)
    if not mine:
        for e in everything:
            do_resolve_failure_event(e)
    return Handled(f"re-planned: plan {decision.plan.pk}, {len(decision.transitions)} transition(s)", True)


def _blames_the_hardware(ev: FailureEvent) -> bool:
    """Whether a sev1 event is evidence against its device or node: a cause, and not a liveness verdict
    alone (a node lost by heartbeat silence, or a recovery of such a loss that failed)."""
    if stored_classification(ev).blame is not failures.Blame.CAUSE:
        return False
    return stored_evidence(ev).detector != failures.DetectorKind.HEARTBEAT


def _handle_node_event(ev: FailureEvent) -> Handled:
    """A node-level sev1 (the node is lost): every task on it is hit; one re-plan covers them all.

    A liveness verdict alone (heartbeats stopped) does not isolate the node: a lost node is out of the
    plans while it is lost, its tasks are re-planned once, and it is back in service when it heartbeats
    again. Only cause-evidence from the node itself isolates it."""
    _mark_handled(ev, ev)
    if ev.severity != Severity.SEV1 or ev.node is None:
        return Handled("node event without action")
    task_ids = sorted(
        set(
            Allocation.objects.filter(active=True, device__node=ev.node)
            .exclude(task__state__in=TERMINAL_TASK_STATES)
            .values_list("task_id", flat=True)
        )
    )
    absorbed: dict[int, list[FailureEvent]] = {}
    for task in TrainingTask.objects.filter(pk__in=task_ids):
        # the task's open events, and those its handler already handed over to this node event: they
        # are resolved with the transition this re-plan starts
        for other in FailureEvent.objects.filter(task=task, task_epoch=task.epoch).filter(
            Q(handled_at__isnull=True) | Q(handled_by=ev)
        ):
            _mark_handled(other, ev)
            absorbed.setdefault(task.pk, []).append(other)
    if _blames_the_hardware(ev):
        isolate(ev)
        check_quarantine(ev.node)
    decision = replan(PlanTrigger.FAILURE, ev, hit_tasks=task_ids)
    by_task = {t.task_id: t for t in decision.transitions}
    for task_id, events in absorbed.items():
        _link(events, by_task.get(task_id))
    if decision.transitions:
        _link([ev], decision.transitions[0])
    else:
        do_resolve_failure_event(ev)
    return Handled(f"node {ev.node.name}: re-planned (plan {decision.plan.pk}) for tasks {task_ids}", True)


def _isolation_reason(ev: FailureEvent) -> str:
    return f"{ev.severity} {ev.kind} (failure event {ev.pk}): {ev.summary}"[:1000]


def isolate(ev: FailureEvent) -> None:
    """Take the failed hardware out of the plans: the device for device evidence, else the node."""
    if ev.device_id is not None and ev.kind != "node_lost":
        device = Device.objects.get(pk=ev.device_id)
        if DEVICE_MACHINE.can(device.state, DeviceState.ISOLATED):
            do_set_device_state(device, DeviceState.ISOLATED, _isolation_reason(ev))
        return
    if ev.node is None:
        return
    node = Node.objects.get(pk=ev.node.pk)
    if node.state not in (NodeState.LOST, NodeState.ISOLATED) and NODE_MACHINE.can(
        node.state, NodeState.ISOLATED
    ):
        do_set_node_state(node, NodeState.ISOLATED, _isolation_reason(ev))


def check_quarantine(node: Node | None) -> bool:
    """Quarantine a node that keeps failing (core ``should_quarantine``), with an operator alert."""
    if node is None:
        return False
    node.refresh_from_db()
    if node.quarantined:
        return False
    policy = failures.EscalationPolicy()
    quarantine, reason = failures.should_quarantine(
        node.name,
        list_failure_history(node, policy.quarantine_window_s),
        timezone.now().timestamp(),
        policy,
    )
    if not quarantine:
        return False
    do_quarantine_node(None, node, reason)
    do_raise_alert(Severity.SEV1, f"Node {node.name} quarantined: {reason}", node=node)
    return True


# --------------------------------------------------------------------------------------------------
# Escalation
# --------------------------------------------------------------------------------------------------


def _chain_length(ev: FailureEvent | None) -> int:
    n = 0
    while ev is not None and ev.escalated_from_id is not None:
        n += 1
        ev = FailureEvent.objects.filter(pk=ev.escalated_from_id).first()
    return n


def _evidence_of(ev: FailureEvent | None, node: Node | None, reason: str) -> failures.Evidence:
    if ev is not None:
        try:
            return failures.Evidence.from_json((ev.evidence or {}).get("core"))
        except ValueError:
            pass
    detector = (
        failures.DetectorKind.HEARTBEAT if ev is not None and ev.kind == "node_lost" else "orchestrator"
    )
    return failures.Evidence(
        detector=str(detector),
        node=node.name if node else (ev.node.name if ev is not None and ev.node is not None else None),
        task_id=str(ev.task_id) if ev is not None and ev.task_id else None,
        message=ev.summary if ev is not None else reason,
        occurred_at=timezone.now().timestamp(),
    )


def escalate(
    source: FailureEvent | None,
    task: TrainingTask,
    during: failures.Action,
    reason: str,
    node: Node | None = None,
) -> FailureEvent | None:
    """Re-classify ``source``'s evidence with ``during_recovery`` and record the escalated event (linked
    by ``escalated_from``); None when the chain is too long and the task was failed instead."""
    task.refresh_from_db()
    if _chain_length(source) + 1 > MAX_ESCALATIONS:
        if task.state not in TERMINAL_TASK_STATES:
            do_set_task_state(task, TaskState.FAILED)
        do_raise_alert(
            Severity.SEV1,
            f"Task {task.name} (#{task.pk}) failed: {MAX_ESCALATIONS} recoveries in a row did not succeed "
            f"({reason})",
            source_event=source,
        )
        return None
    evidence = replace(_evidence_of(source, node, reason), during_recovery=during)
    c = failures.classify(evidence)
    if source is not None and source.severity == Severity.SEV1:
        c = replace(c, severity=failures.Severity.SEV1, action=failures.Action.ISOLATE_AND_REPLAN)
    blamed = node or (source.node if source is not None else None)
    new, _ = do_record_failure_event(
        FailureReport(
            detector=Detector.ORCHESTRATOR,
            kind="recovery_failed",
            severity=Severity(c.severity.value),
            occurred_at=timezone.now(),
            action=Action(c.action.value),
            summary=f"{reason}: {c.reason}",
            evidence={
                "reason": reason,
                "during_recovery": str(during),
                "core": evidence.to_json(),
                "classification": c.to_json(),
            },
            node=blamed,
            device=source.device if source is not None and blamed == source.node else None,
            task=task,
            escalated_from=source,
        )
    )
    FailureEvent.objects.filter(pk=new.pk).update(task_epoch=task.epoch)
    new.task_epoch = task.epoch
    do_raise_alert(
        Severity(c.severity.value),
        f"Escalated to {c.severity} for task {task.name} (#{task.pk}): {reason}",
        source_event=new,
        node=blamed,
    )
    return new


def escalate_failed_transition(t: Transition, reason: str, node: Node | None) -> FailureEvent | None:
    """A transition failed (a command failed or was rejected, a step timed out): escalate its failure."""
    task = TrainingTask.objects.get(pk=t.task_id)
    source = (
        FailureEvent.objects.filter(pk=t.failure_event_id).select_related("node").first()
        if t.failure_event_id is not None
        else None
    )
    return escalate(source, task, recovery_action_for(t.kind), reason, node)


def on_transition_failed(
    sender: object, transition: Transition, reason: str, node: Node | None, **_: object
) -> None:
    """Receiver of :data:`controlplane.apps.planning.signals.transition_failed`: escalate the failure and
    handle the escalated event at once."""
    new = escalate_failed_transition(transition, reason, node)
    if new is not None:
        request_failure_handling(new.pk, countdown=0.0)
