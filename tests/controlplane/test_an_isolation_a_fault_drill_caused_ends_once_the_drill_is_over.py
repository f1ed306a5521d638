"""Hardware isolated because of a fault drill (the drill's straggler or crash handled like any failure)
was not judged: once the drill's attribution window has passed it returns to service without probation,
instead of staying out for the whole return-to-service window. An isolation no drill explains, or a
device that failed again on its own after the drill, waits as before."""

from __future__ import annotations

from datetime import timedelta

from django.test import override_settings
from django.utils import timezone

from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.fleet.services import do_enqueue_command, do_set_device_state, do_set_node_state
from controlplane.apps.incidents.probation import do_release_isolations, on_probation
from controlplane.apps.incidents.selectors import DRILL_ATTRIBUTION_S
from tests.controlplane.factories import FailureEventFactory, NodeFactory


def _isolated_device(drilled: bool) -> Device:
    node = NodeFactory(state="healthy", devices=2)
    if drilled:
        do_enqueue_command(node, "inject_fault", {"fault": {"kind": "straggler"}})
    device = Device.objects.get(node=node, index=1)
    do_set_device_state(device, "isolated", "sev1 straggler (failure event 1): rank persistently slower")
    device.refresh_from_db()
    return device


@override_settings(UNICRON_RETURN_TO_SERVICE_AFTER_S=1800.0, UNICRON_PROBATION_S=3600.0)
def test_a_device_a_drill_isolated_is_back_without_probation_once_the_drill_is_over(db: None) -> None:
    drilled = _isolated_device(drilled=True)
    undrilled = _isolated_device(drilled=False)
    assert drilled.isolated_at is not None

    during = do_release_isolations(now=drilled.isolated_at + timedelta(seconds=DRILL_ATTRIBUTION_S / 2))
    assert during.devices == []

    after = drilled.isolated_at + timedelta(seconds=DRILL_ATTRIBUTION_S + 5)
    released = do_release_isolations(now=after)

    assert released.devices == released.drilled_devices == [drilled.pk]
    assert "on probation: devices [], nodes []" in released.describe()  # the task's log line
    assert f"without probation: devices [{drilled.pk}]" in released.describe()
    drilled.refresh_from_db()
    undrilled.refresh_from_db()
    assert (drilled.state, undrilled.state) == ("healthy", "isolated")
    assert not on_probation(drilled.probation_until, after)


@override_settings(UNICRON_RETURN_TO_SERVICE_AFTER_S=1800.0)
def test_a_drilled_device_that_failed_on_its_own_afterwards_stays_isolated(db: None) -> None:
    device = _isolated_device(drilled=True)
    assert device.isolated_at is not None
    later = device.isolated_at + timedelta(seconds=DRILL_ATTRIBUTION_S + 10)
    FailureEventFactory(
        node=device.node, device=device, kind="cuda_error", severity="sev2", occurred_at=later,
        detected_at=later,
    )  # fmt: skip
    assert do_release_isolations(now=later + timedelta(seconds=30)).devices == []
    device.refresh_from_db()
    assert device.state == "isolated"


@override_settings(UNICRON_RETURN_TO_SERVICE_AFTER_S=1800.0)
def test_a_node_a_drill_isolated_is_back_too(db: None) -> None:
    node = NodeFactory(state="healthy", devices=2)
    do_enqueue_command(node, "inject_fault", {"fault": {"kind": "exception"}})
    do_set_node_state(node, "isolated", "sev1 gpu_lost (failure event 2)")
    node.refresh_from_db()
    assert node.isolated_at is not None
    released = do_release_isolations(now=node.isolated_at + timedelta(seconds=DRILL_ATTRIBUTION_S + 5))
    assert released.nodes == released.drilled_nodes == [node.pk]
    assert Node.objects.get(pk=node.pk).state == "joining"
    assert timezone.now() < node.isolated_at + timedelta(seconds=1800)
