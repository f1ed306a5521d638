"""Node health watchdog (docs/ARCHITECTURE.md §7.1, node health monitoring): Celery beat runs
``fleet.check_node_health`` every second (schedule created by fleet's migration 0003; the task is in
:mod:`controlplane.apps.incidents.tasks`). The watchdog is a failure detector: it changes the nodes' states
through the fleet's services and records what it finds as failure events and alerts, so it lives with them.

A node whose last heartbeat is older than ``UNICRON_SUSPECT_AFTER_S`` becomes ``suspect``; older than
``UNICRON_LOST_AFTER_S`` it becomes ``lost`` with a ``node_health`` :class:`FailureEvent` (classified by
the core table: sev1, isolate and re-plan) and an operator alert. The agent link marks a node suspect
the moment its socket closes, so a crashed agent is declared lost by this sweep.

Mass silence: nodes do not fail together; a deaf control plane (the ASGI server that holds the agents'
sockets down or restarting) or a partition between it and the cluster silences all of them at once,
and declaring them lost would tear down and relaunch every task although every worker is fine. When
the silent nodes (past the suspect deadline, or past the lost deadline less one heartbeat period when
that comes first: :func:`silent_after`, so heartbeats that straddle a tick count together) are at least
``UNICRON_MASS_SILENCE_MIN_NODES`` and ``UNICRON_MASS_SILENCE_FRACTION`` of the watched ones
(:func:`controlplane.core.failures.mass_silence`), nodes past ``UNICRON_LOST_AFTER_S`` are *held*
suspect and declared lost only past ``UNICRON_MASS_SILENCE_LOST_AFTER_S`` (60 s: a real rack power loss
is still handled); one sev1 alert per episode tells the operator (not one per sweep: none is raised
while an alert of the same kind created since the earliest silent node's last heartbeat exists). A
heartbeat ends the episode: the agent link brings the node back to healthy. Fewer silent nodes than
the minimum (one lost node, a 2-node cluster) are handled as before. The episode is remembered (in
Redis, beside the heartbeat times) for as long as its nodes may be held: a node silent since it was seen
keeps the longer deadline though most others are back already (the agents of a restarted ASGI server
reconnect one by one, and the last two of four are no longer "most"); a node that falls silent after it
is judged by the usual deadline.

Detection latency for a node that dies right after a heartbeat: ``lost_after`` plus the task's latency,
not plus the beat period: a sweep that leaves a silent node watched (suspect already, or held by a mass
silence) gives the earliest deadline among them (``HealthSweep.next_deadline_s``), and the task sweeps
again at that moment when it comes before the next tick (``fleet.check_node_health``).

Where the heartbeats are: :mod:`controlplane.apps.fleet.last_seen` (a Redis sorted set of each node's
newest heartbeat, in the time the agent sent it). A sweep reads the nodes silent past the earlier
deadline from it by score, so its cost grows with the silent nodes, not the fleet; it drops the ones that
are no longer watched (lost, isolated, gone: their next heartbeat puts them back), and when the set holds
fewer entries than there are watched nodes (Redis lost it) it gives the missing ones the sweep's time:
they are judged from then on, never forgotten. ``Node.last_heartbeat_at`` is written when the sweep
changes a node's state (and at hello).

No run row per sweep (STYLE §5): at 1 Hz it would be 86,400 rows a day saying "nothing happened";
every state change the sweep makes is a row already (node state, failure event, alert).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from controlplane.apps.common.errors import StaleState
from controlplane.apps.common.triggers import request_failure_handling
from controlplane.apps.fleet import last_seen
from controlplane.apps.fleet.choices import NodeState
from controlplane.apps.fleet.models import Node
from controlplane.apps.fleet.services import do_set_node_state
from controlplane.apps.incidents.choices import Action, Detector, Severity
from controlplane.apps.incidents.models import Alert
from controlplane.apps.incidents.services import FailureReport, do_raise_alert, do_record_failure_event
from controlplane.core import failures

log = logging.getLogger(__name__)

WATCHED_STATES = (NodeState.HEALTHY, NodeState.SUSPECT)
_LOST_REPORT_NS = uuid.UUID("6c1f4f4e-8a53-4a57-9b0e-2f3d8c6b1a10")
MASS_SILENCE_ALERT_PREFIX = "Mass silence:"
LINK_BACKLOG_ALERT_PREFIX = "Agent link backlog:"
LINK_BACKLOG_CHECK_EVERY_S = 10
LINK_BACKLOG_REALERT_AFTER_S = 600.0
READING_LAG_WINDOW_S = 2.0
"""The heartbeats read in this last window tell how far behind the agent link reads
(:func:`controlplane.core.failures.readers_lag`: the process reading agent links that lags most, each judged
by its own heartbeats); the deadlines are extended by it."""
READING_LAG_LOG_S = 0.5
"""A lag this long is logged (shorter ones are the link's ordinary jitter)."""
RECONCILE_EVERY_S = 30
"""Besides whenever the set holds fewer entries than there are watched nodes (Redis lost it), the sweep
checks every watched node has an entry once every this many seconds."""
_MASS_SILENCE_LOCK_KEY = 0x756E6D73  # "unms": one mass-silence alert at a time across concurrent sweeps


@dataclass(frozen=True)
class MassSilence:
    """A mass silence found by one sweep: ``silent`` of ``watched`` nodes, lost only past ``lost_after_s``."""

    silent: int
    watched: int
    lost_after_s: float

    def describe(self) -> str:
        return f"mass silence: {self.silent} of {self.watched} nodes silent"


@dataclass(frozen=True)
class HealthSweep:
    checked: int
    suspect: list[str]
    lost: list[str]
    held: list[str] = field(default_factory=list)
    """Silent past ``UNICRON_LOST_AFTER_S`` but kept suspect because of a mass silence."""
    next_deadline_s: float | None = None
    """When the earliest silent node this sweep left watched passes its next deadline (epoch seconds):
    the task sweeps again then when that comes before its next tick."""


def _lost_report_id(node: Node, last_s: float) -> uuid.UUID:
    """Idempotency key of one loss: the node and the heartbeat it fell silent after."""
    return uuid.uuid5(_LOST_REPORT_NS, f"{node.pk}:{last_s:.6f}")


def _heard_at(node_id: int, swept_s: float) -> float:
    """The node's newest heartbeat now (one may have arrived since the sweep read ``swept_s``)."""
    return max(last_seen.last_seen([node_id]).get(node_id, swept_s), swept_s)


@transaction.atomic
def _declare_lost(
    node_id: int, last_s: float, now: datetime, lost_after_s: float, silence: MassSilence | None = None
) -> bool:
    node = Node.objects.select_for_update(no_key=True).get(pk=node_id)
    if node.state not in WATCHED_STATES:
        return False  # changed since the sweep read it
    last_s = _heard_at(node_id, last_s)
    if not failures.heartbeat_expired(last_s, now.timestamp(), lost_after_s):
        return False  # a heartbeat arrived meanwhile
    last_seen_at = datetime.fromtimestamp(last_s, tz=UTC)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=last_seen_at)
    silent_s = now.timestamp() - last_s
    node = do_set_node_state(node, NodeState.LOST, f"no heartbeat for {silent_s:.1f}s")
    evidence = failures.Evidence(
        detector=failures.DetectorKind.HEARTBEAT,
        node=node.name,
        message=f"no heartbeat for {silent_s:.1f}s",
        occurred_at=last_s,
    )
    c = failures.classify(evidence)
    during = "" if silence is None else f", {silence.describe()}"
    event, created = do_record_failure_event(
        FailureReport(
            detector=Detector.NODE_HEALTH,
            kind="node_lost",
            severity=Severity(c.severity.value),
            occurred_at=last_seen_at,
            action=Action.ISOLATE_AND_REPLAN,
            summary=f"{c.reason} (silent {silent_s:.1f}s > {lost_after_s:g}s{during})",
            evidence={
                "last_heartbeat_at": last_seen_at.isoformat(),
                "silent_s": round(silent_s, 3),
                "lost_after_s": lost_after_s,
                "mass_silence": None
                if silence is None
                else {"silent": silence.silent, "watched": silence.watched},
                "classification": {"severity": str(c.severity), "rule": c.rule, "reason": c.reason},
            },
            report_id=_lost_report_id(node, last_s),
            node=node,
        )
    )
    if created:
        request_failure_handling(event.pk, countdown=0.0)  # isolate, re-plan every task on the node
        do_raise_alert(
            Severity(c.severity.value),
            f"Node {node.name} lost: no heartbeat for {silent_s:.1f}s{during}",
            source_event=event,
            node=node,
        )
    return True


@transaction.atomic
def _mark_suspect(node: Node, last_s: float, now_s: float, suspect_after_s: float) -> bool:
    last_s = _heard_at(node.pk, last_s)
    if not failures.heartbeat_expired(last_s, now_s, suspect_after_s):
        return False  # a heartbeat arrived meanwhile
    try:
        do_set_node_state(node, NodeState.SUSPECT, f"no heartbeat for {now_s - last_s:.1f}s")
    except StaleState:  # a heartbeat, a hello or another sweep changed it first
        return False
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=datetime.fromtimestamp(last_s, tz=UTC))
    return True


@transaction.atomic
def _raise_mass_silence_alert(silence: MassSilence, silent_since: datetime) -> bool:
    """One alert per mass-silence episode: none if one was raised since the earliest silent node's last
    heartbeat (whatever its state since: resolving it does not make the same silence new)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_MASS_SILENCE_LOCK_KEY])
    if Alert.objects.filter(
        message__startswith=MASS_SILENCE_ALERT_PREFIX, created_at__gte=silent_since
    ).exists():
        return False
    do_raise_alert(
        Severity.SEV1,
        f"{MASS_SILENCE_ALERT_PREFIX} {silence.silent} of {silence.watched} nodes fell silent at once; the "
        "control plane (the ASGI server holding the agents' sockets) or its network to the cluster is the "
        f"likely cause, not the nodes. They are held suspect and declared lost only after "
        f"{silence.lost_after_s:g}s without a heartbeat.",
    )
    return True


def _find_mass_silence(silent: int, lost_after_s: float) -> MassSilence | None:
    watched = Node.objects.filter(state__in=WATCHED_STATES).count()
    silent = min(silent, watched)  # a node changed state between the two reads
    if not failures.mass_silence(
        watched,
        silent,
        min_nodes=int(settings.UNICRON_MASS_SILENCE_MIN_NODES),
        fraction=float(settings.UNICRON_MASS_SILENCE_FRACTION),
    ):
        return None
    return MassSilence(silent, watched, max(lost_after_s, float(settings.UNICRON_MASS_SILENCE_LOST_AFTER_S)))


def _silent_watched_nodes(now_s: float, cutoff_s: float) -> list[tuple[Node, float]]:
    """The watched nodes whose newest heartbeat is older than ``cutoff_s``, with its time, oldest first;
    entries of nodes no longer watched are dropped from the set on the way."""
    watched = Node.objects.filter(state__in=WATCHED_STATES)
    if last_seen.tracked() < watched.count() or int(now_s) % RECONCILE_EVERY_S == 0:
        present = last_seen.last_seen(watched.values_list("pk", flat=True))
        missing = [
            pk for pk in watched.values_list("pk", flat=True) if pk not in present
        ]  # judged from now on
        if missing and last_seen.backfill(dict.fromkeys(missing, max(now_s, time.time()))):
            log.warning(
                "node health: %d watched nodes had no heartbeat entry; judged from now on", len(missing)
            )
    silent = last_seen.seen_before(cutoff_s)
    if not silent:
        return []
    nodes = {n.pk: n for n in Node.objects.filter(pk__in=list(silent))}
    last_seen.forget(pk for pk in silent if pk not in nodes or nodes[pk].state not in WATCHED_STATES)
    found = [(nodes[pk], t) for pk, t in silent.items() if pk in nodes and nodes[pk].state in WATCHED_STATES]
    return sorted(found, key=lambda pair: (pair[1], pair[0].name))


def silent_after(suspect_after_s: float, lost_after_s: float, heartbeat_interval_s: float) -> float:
    """How long a node must have been silent for a sweep to read it (and count it toward a mass silence).

    An outage silences every node within one heartbeat period, so when the earliest of them passes the lost
    deadline the latest has been silent for that deadline less one period: counted from there, they are one
    silence. Reading from the suspect deadline alone would leave the latest out whenever the two deadlines
    are less than a period apart, and the earliest would be declared lost one by one."""
    return max(0.0, min(suspect_after_s, lost_after_s - heartbeat_interval_s))


def sweep_node_health(now: datetime | None = None) -> HealthSweep:
    """One pass of the watchdog; safe to run concurrently (row locks and compare-and-swap)."""
    now = now or timezone.now()
    now_s = now.timestamp()
    lag = failures.readers_lag(
        last_seen.recent_delays_by_reader(time.time(), READING_LAG_WINDOW_S),
        float(settings.UNICRON_MASS_SILENCE_LOST_AFTER_S),
    )
    if lag >= READING_LAG_LOG_S:
        log.warning("node health: the agent link reads heartbeats %.1fs late: deadlines extended by it", lag)
    suspect_after = float(settings.UNICRON_SUSPECT_AFTER_S) + lag
    lost_after = float(settings.UNICRON_LOST_AFTER_S) + lag
    cutoff = now_s - silent_after(suspect_after, lost_after, float(settings.UNICRON_HEARTBEAT_INTERVAL_S))
    stale = _silent_watched_nodes(now_s, cutoff)
    found = _find_mass_silence(len(stale), lost_after) if stale else None
    if found is not None:
        last_seen.note_mass_silence(
            last_seen.MassSilenceSeen(cutoff, found.silent, found.watched, found.lost_after_s)
        )
    episode = last_seen.mass_silence_seen() if stale and found is None else None
    suspect: list[str] = []
    lost: list[str] = []
    held: list[str] = []
    holding: MassSilence | None = None
    deadlines: list[float] = []
    for node, last_s in stale:
        silence = found
        if silence is None and episode is not None and last_s < episode.silent_before:
            # silent since the episode was seen, though most others are back (a restarted ASGI server's
            # agents reconnect one by one): still part of it, still judged by its longer deadline
            silence = MassSilence(episode.silent, episode.watched, episode.lost_after_s)
        deadlines.append(last_s + (lost_after if silence is None else silence.lost_after_s))
        if silence is not None and failures.heartbeat_expired(last_s, now_s, silence.lost_after_s):
            if _declare_lost(node.pk, last_s, now, silence.lost_after_s, silence):
                lost.append(node.name)
        elif failures.heartbeat_expired(last_s, now_s, lost_after):
            if silence is not None:
                holding = silence
                held.append(node.name)  # lost only past the longer bound; suspect meanwhile
                if node.state == NodeState.HEALTHY and _mark_suspect(node, last_s, now_s, lost_after):
                    suspect.append(node.name)
            elif _declare_lost(node.pk, last_s, now, lost_after):
                lost.append(node.name)
        elif (
            node.state == NodeState.HEALTHY
            and failures.heartbeat_expired(last_s, now_s, suspect_after)
            and _mark_suspect(node, last_s, now_s, suspect_after)
        ):
            suspect.append(node.name)
    if holding is not None:
        silent_since = datetime.fromtimestamp(min(t for _, t in stale), tz=UTC)
        if _raise_mass_silence_alert(holding, silent_since):
            log.error(
                "node health: %s; holding %s suspect up to %gs",
                holding.describe(),
                held,
                holding.lost_after_s,
            )
    if suspect or lost or held:
        log.warning("node health: suspect %s, lost %s, held %s", suspect, lost, held)
    ahead = [d for d in deadlines if d > now_s]
    return HealthSweep(
        checked=len(stale), suspect=suspect, lost=lost, held=held, next_deadline_s=min(ahead, default=None)
    )


def check_link_backlog(now: datetime | None = None) -> bool:
    """An operator alert when the agent link's heartbeats queue longer than
    ``UNICRON_AGENT_LINK_DELAY_ALERT_S`` (p99 of the latest ones): liveness is judged in the agents' time,
    so a saturated link no longer hides behind fresh-looking stamps, but the operator must still hear of
    it. One alert per :data:`LINK_BACKLOG_REALERT_AFTER_S` while it lasts."""
    now = now or timezone.now()
    delay = last_seen.link_delay()
    bound = float(settings.UNICRON_AGENT_LINK_DELAY_ALERT_S)
    if delay is None or delay.p99_s <= bound:
        return False
    since = now - timedelta(seconds=LINK_BACKLOG_REALERT_AFTER_S)
    if Alert.objects.filter(message__startswith=LINK_BACKLOG_ALERT_PREFIX, created_at__gte=since).exists():
        return False
    do_raise_alert(
        Severity.SEV2,
        f"{LINK_BACKLOG_ALERT_PREFIX} heartbeats wait {delay.p99_s:.2f}s (p99 of the latest {delay.samples}; "
        f"median {delay.p50_s:.2f}s, max {delay.max_s:.2f}s) before the control plane reads them, above the "
        f"{bound:g}s bound. The ASGI processes holding the agents' sockets are saturated: add processes "
        "(docs/DEPLOY.md) or find what slows them.",
    )
    log.error("agent link backlog: p99 %.2fs over %d heartbeats", delay.p99_s, delay.samples)
    return True
