"""Failures that follow a fault drill on a node are the drill's doing: they are handled, but they do not
count toward the node's quarantine (two sev1 within the window quarantine a node otherwise)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from controlplane.apps.fleet.models import AgentCommand, Node
from controlplane.apps.fleet.services import do_enqueue_command
from controlplane.apps.incidents.models import Alert
from controlplane.apps.planning.handling import check_quarantine
from tests.controlplane.factories import FailureEventFactory, NodeFactory


def _two_sev1(node: Node, minutes_ago: float) -> None:
    at = timezone.now() - timedelta(minutes=minutes_ago)
    for kind in ("straggler", "worker_exited"):
        FailureEventFactory(node=node, kind=kind, severity="sev1", occurred_at=at, detected_at=at)


def test_failures_right_after_a_drill_do_not_quarantine_the_node(db: None) -> None:
    node = NodeFactory(devices=2)
    do_enqueue_command(node, "inject_fault", {"fault": {"kind": "straggler"}})
    _two_sev1(node, minutes_ago=0)
    assert check_quarantine(node) is False
    node.refresh_from_db()
    assert not node.quarantined


def test_the_same_failures_without_a_drill_quarantine_it_with_an_alert(db: None) -> None:
    node = NodeFactory(devices=2)
    _two_sev1(node, minutes_ago=0)
    assert check_quarantine(node) is True
    node.refresh_from_db()
    assert node.quarantined
    assert Alert.objects.filter(node=node, message__contains="quarantined").exists()


def test_a_drill_long_before_excuses_nothing(db: None) -> None:
    node = NodeFactory(devices=2)
    drill = do_enqueue_command(node, "inject_fault", {"fault": {"kind": "crash"}})
    AgentCommand.objects.filter(pk=drill.pk).update(created_at=timezone.now() - timedelta(minutes=5))
    _two_sev1(node, minutes_ago=0)
    assert check_quarantine(node) is True
