"""Isolation is not forever (docs/ARCHITECTURE.md §7.2): an isolated device or node that gave no new
cause-evidence for ``UNICRON_RETURN_TO_SERVICE_AFTER_S`` returns to service on probation for
``UNICRON_PROBATION_S``, and a re-plan puts it back to work; a cause failure while on probation isolates
it again at once (:func:`controlplane.core.failures.escalate_on_probation`). An isolation that was a fault
drill's doing (a drill sent to the node up to ``DRILL_ATTRIBUTION_S`` before it) judged nothing about the
hardware: it ends, without probation, once that window has passed. A quarantined node stays out until an
operator clears it. ``incidents.release_isolations`` (Celery beat) runs :func:`do_release_isolations`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane.apps.common.errors import Conflict
from controlplane.apps.fleet.choices import DeviceState, NodeState
from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.fleet.services import do_return_device_to_service, do_return_node_to_service
from controlplane.apps.incidents.selectors import (
    DRILL_ATTRIBUTION_S,
    has_cause_evidence_since,
    isolated_by_drill,
)

DRILL_RETURN_REASON = "its isolation was a fault drill's doing: back in service"
AFTER_A_CLEAN_WINDOW_REASON = "no new failure since its isolation: back on probation"


@dataclass
class Released:
    """What one sweep returned to service: all of it (``devices``, ``nodes``), and which of it came back
    without probation because a fault drill had caused its isolation."""

    devices: list[int] = field(default_factory=list)
    nodes: list[int] = field(default_factory=list)
    drilled_devices: list[int] = field(default_factory=list)
    drilled_nodes: list[int] = field(default_factory=list)

    def describe(self) -> str:
        on_probation = (
            [d for d in self.devices if d not in self.drilled_devices],
            [n for n in self.nodes if n not in self.drilled_nodes],
        )
        return (
            f"returned to service on probation: devices {on_probation[0]}, nodes {on_probation[1]}; "
            f"after a fault drill, without probation: devices {self.drilled_devices}, "
            f"nodes {self.drilled_nodes}"
        )


def on_probation(until: datetime | None, now: datetime | None = None) -> bool:
    return until is not None and until > (now or timezone.now())


def do_release_isolations(now: datetime | None = None) -> Released:
    """Return every isolated device and (unquarantined) node whose isolation is older than the window
    and that gave no cause-evidence since, on probation; one a fault drill caused, once the drill's
    window has passed, without probation."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=float(settings.UNICRON_RETURN_TO_SERVICE_AFTER_S))
    drill_cutoff = now - timedelta(seconds=DRILL_ATTRIBUTION_S)
    earliest = max(cutoff, drill_cutoff)
    probation_s = float(settings.UNICRON_PROBATION_S)
    out = Released()
    # isolated before isolations were timed (or by a path that does not time them): the window starts now
    Device.objects.filter(state=DeviceState.ISOLATED, isolated_at__isnull=True).update(isolated_at=now)
    Node.objects.filter(state=NodeState.ISOLATED, isolated_at__isnull=True).update(isolated_at=now)
    devices = Device.objects.filter(state=DeviceState.ISOLATED, isolated_at__lte=earliest).select_related(
        "node"
    )
    for device in devices:
        assert device.isolated_at is not None
        terms = _terms(device.node_id, device.isolated_at, cutoff, probation_s)
        if terms is None or has_cause_evidence_since(device.isolated_at, device=device):
            continue
        with transaction.atomic():
            try:
                do_return_device_to_service(None, device, *terms)
            except Conflict:
                continue  # changed meanwhile
        out.devices.append(device.pk)
        if terms[1] == DRILL_RETURN_REASON:
            out.drilled_devices.append(device.pk)
    nodes = Node.objects.filter(state=NodeState.ISOLATED, quarantined=False, isolated_at__lte=earliest)
    for node in nodes:
        assert node.isolated_at is not None
        terms = _terms(node.pk, node.isolated_at, cutoff, probation_s)
        if terms is None or has_cause_evidence_since(node.isolated_at, node=node):
            continue
        with transaction.atomic():
            try:
                do_return_node_to_service(None, node, *terms)
            except Conflict:
                continue
        out.nodes.append(node.pk)
        if terms[1] == DRILL_RETURN_REASON:
            out.drilled_nodes.append(node.pk)
    return out


def _terms(
    node_id: int, isolated_at: datetime, cutoff: datetime, probation_s: float
) -> tuple[float, str] | None:
    """The probation and the reason an isolation at ``isolated_at`` ends with now, or None while it lasts:
    a drill's ends without probation, any other once it is older than ``cutoff``."""
    if isolated_by_drill(node_id, isolated_at):
        return 0.0, DRILL_RETURN_REASON
    if isolated_at <= cutoff:
        return probation_s, AFTER_A_CLEAN_WINDOW_REASON
    return None
