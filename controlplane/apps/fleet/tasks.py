"""Node health watchdog (DESIGN §5.1, node health monitoring): Celery beat runs
``fleet.check_node_health`` every second (schedule created by migration 0003).

A node whose last heartbeat is older than ``UNICRON_SUSPECT_AFTER_S`` becomes ``suspect``; older than
``UNICRON_LOST_AFTER_S`` it becomes ``lost`` with a ``node_health`` :class:`FailureEvent` (classified by
the core table: sev1, isolate and re-plan) and an operator alert. The agent link marks a node suspect
the moment its socket closes, so a crashed agent is declared lost by this sweep.

Detection latency bound for a node that dies right after a heartbeat:
``lost_after + period + task latency`` (≈ 3 s + 1 s + queueing with the defaults). Beat's 1 s interval is
its practical floor; §5.1 asks for ≤ 3 s, which needs ``UNICRON_LOST_AFTER_S`` ≈ 2 s (two missed beats)
if the bound must hold in the worst case.

No run row per sweep (STYLE §5): at 1 Hz it would be 86,400 rows a day saying "nothing happened";
every state change the sweep makes is a row already (node state, failure event, alert).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane.apps.common.errors import StaleState
from controlplane.apps.fleet.choices import NodeState
from controlplane.apps.fleet.models import Node
from controlplane.apps.fleet.services import do_set_node_state
from controlplane.apps.incidents.choices import Action, Detector, Severity
from controlplane.apps.incidents.services import FailureReport, do_raise_alert, do_record_failure_event
from controlplane.apps.planning.triggers import request_failure_handling
from controlplane.core import failures

log = logging.getLogger(__name__)

WATCHED_STATES = (NodeState.HEALTHY, NodeState.SUSPECT)
_LOST_REPORT_NS = uuid.UUID("6c1f4f4e-8a53-4a57-9b0e-2f3d8c6b1a10")


@dataclass(frozen=True)
class HealthSweep:
    checked: int
    suspect: list[str]
    lost: list[str]


def _lost_report_id(node: Node) -> uuid.UUID:
    """Idempotency key of one loss: the node and the heartbeat it fell silent after."""
    assert node.last_heartbeat_at is not None
    return uuid.uuid5(_LOST_REPORT_NS, f"{node.pk}:{node.last_heartbeat_at.isoformat()}")


@transaction.atomic
def _declare_lost(node_id: int, now: datetime, lost_after_s: float) -> bool:
    node = Node.objects.select_for_update().get(pk=node_id)
    last_seen = node.last_heartbeat_at
    if node.state not in WATCHED_STATES or last_seen is None:
        return False  # changed since the sweep read it
    last_s = last_seen.timestamp()
    if not failures.heartbeat_expired(last_s, now.timestamp(), lost_after_s):
        return False  # a heartbeat arrived meanwhile
    silent_s = now.timestamp() - last_s
    node = do_set_node_state(node, NodeState.LOST, f"no heartbeat for {silent_s:.1f}s")
    evidence = failures.Evidence(
        detector=failures.DetectorKind.HEARTBEAT,
        node=node.name,
        message=f"no heartbeat for {silent_s:.1f}s",
        occurred_at=last_s,
    )
    c = failures.classify(evidence)
    event, created = do_record_failure_event(
        FailureReport(
            detector=Detector.NODE_HEALTH,
            kind="node_lost",
            severity=Severity(c.severity.value),
            occurred_at=last_seen,
            action=Action.ISOLATE_AND_REPLAN,
            summary=f"{c.reason} (silent {silent_s:.1f}s > {lost_after_s:g}s)",
            evidence={
                "last_heartbeat_at": last_seen.isoformat(),
                "silent_s": round(silent_s, 3),
                "lost_after_s": lost_after_s,
                "classification": {"severity": str(c.severity), "rule": c.rule, "reason": c.reason},
            },
            report_id=_lost_report_id(node),
            node=node,
        )
    )
    if created:
        request_failure_handling(event.pk, countdown=0.0)  # isolate, re-plan every task on the node
        do_raise_alert(
            Severity(c.severity.value),
            f"Node {node.name} lost: no heartbeat for {silent_s:.1f}s",
            source_event=event,
            node=node,
        )
    return True


def _mark_suspect(node: Node, silent_s: float) -> bool:
    try:
        do_set_node_state(node, NodeState.SUSPECT, f"no heartbeat for {silent_s:.1f}s")
    except StaleState:  # a heartbeat, a hello or another sweep changed it first
        return False
    return True


def sweep_node_health(now: datetime | None = None) -> HealthSweep:
    """One pass of the watchdog; safe to run concurrently (row locks and compare-and-swap)."""
    now = now or timezone.now()
    suspect_after = float(settings.UNICRON_SUSPECT_AFTER_S)
    lost_after = float(settings.UNICRON_LOST_AFTER_S)
    cutoff = now - timedelta(seconds=min(suspect_after, lost_after))
    stale = list(Node.objects.filter(state__in=WATCHED_STATES, last_heartbeat_at__lt=cutoff).order_by("name"))
    suspect: list[str] = []
    lost: list[str] = []
    now_s = now.timestamp()
    for node in stale:
        assert node.last_heartbeat_at is not None
        last_s = node.last_heartbeat_at.timestamp()
        if failures.heartbeat_expired(last_s, now_s, lost_after):
            if _declare_lost(node.pk, now, lost_after):
                lost.append(node.name)
        elif (
            node.state == NodeState.HEALTHY
            and failures.heartbeat_expired(last_s, now_s, suspect_after)
            and _mark_suspect(node, now_s - last_s)
        ):
            suspect.append(node.name)
    if suspect or lost:
        log.warning("node health: suspect %s, lost %s", suspect, lost)
    return HealthSweep(checked=len(stale), suspect=suspect, lost=lost)


@shared_task(name="fleet.check_node_health", ignore_result=True)  # type: ignore[misc]
def check_node_health() -> dict[str, object]:
    sweep = sweep_node_health()
    return {"checked": sweep.checked, "suspect": sweep.suspect, "lost": sweep.lost}
