"""When most nodes fall silent at once the control plane (or its network) is deaf, not the nodes: the
health watchdog holds them suspect, raises one alert per episode and declares them lost only past
``UNICRON_MASS_SILENCE_LOST_AFTER_S``; a single silent node or a 2-node cluster is handled as before."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone
from pytest_django.fixtures import SettingsWrapper

from controlplane.apps.fleet import last_seen
from controlplane.apps.fleet.models import Node
from controlplane.apps.incidents.models import Alert, FailureEvent
from controlplane.apps.incidents.node_health import MASS_SILENCE_ALERT_PREFIX, sweep_node_health
from tests.controlplane.factories import NodeFactory

SUSPECT, LOST, MASS_LOST = 2.0, 3.0, 60.0

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _deadlines(settings: SettingsWrapper) -> None:
    settings.UNICRON_SUSPECT_AFTER_S = SUSPECT
    settings.UNICRON_LOST_AFTER_S = LOST
    settings.UNICRON_MASS_SILENCE_MIN_NODES = 3
    settings.UNICRON_MASS_SILENCE_FRACTION = 0.5
    settings.UNICRON_MASS_SILENCE_LOST_AFTER_S = MASS_LOST


def nodes_silent_since(last: datetime, count: int) -> list[Node]:
    return [NodeFactory(last_heartbeat_at=last) for _ in range(count)]


def states(nodes: list[Node]) -> list[str]:
    return [Node.objects.get(pk=n.pk).state for n in nodes]


def mass_alerts() -> list[Alert]:
    return list(Alert.objects.filter(message__startswith=MASS_SILENCE_ALERT_PREFIX))


def at(last: datetime, seconds: float) -> datetime:
    return last + timedelta(seconds=seconds)


def test_four_nodes_silent_past_lost_after_are_held_suspect_with_one_alert_per_episode() -> None:
    last = timezone.now() - timedelta(minutes=5)
    nodes = nodes_silent_since(last, 4)
    names = sorted(n.name for n in nodes)

    sweep = sweep_node_health(now=at(last, 5.0))

    assert (sweep.lost, sweep.held, sorted(sweep.suspect)) == ([], names, names)
    assert states(nodes) == ["suspect"] * 4
    assert not FailureEvent.objects.exists()
    [alert] = Alert.objects.all()
    assert alert.message.startswith(MASS_SILENCE_ALERT_PREFIX)
    assert (alert.severity, alert.state, alert.node_id, alert.source_event_id) == ("sev1", "open", None, None)
    assert "4 of 4 nodes fell silent at once" in alert.message
    assert "control plane" in alert.message
    assert "60s" in alert.message

    for later in (6.0, 30.0, MASS_LOST - 0.5):  # later ticks of the same silence
        again = sweep_node_health(now=at(last, later))
        assert (again.lost, again.held, again.suspect) == ([], names, [])
    assert Alert.objects.count() == 1
    assert not FailureEvent.objects.exists()


def test_nodes_whose_last_heartbeats_straddle_a_tick_are_held_together() -> None:
    """An outage silences every node within one heartbeat period: on the first tick past ``lost_after``
    only the earliest is past it, the others are past ``suspect_after``; none of them is lost."""
    last = timezone.now() - timedelta(minutes=5)
    nodes = [NodeFactory(last_heartbeat_at=at(last, offset)) for offset in (0.0, 0.3, 0.6, 0.9)]

    sweep = sweep_node_health(now=at(last, LOST + 0.1))

    assert (sweep.lost, sweep.held) == ([], [nodes[0].name])
    assert states(nodes) == ["suspect"] * 4
    assert len(mass_alerts()) == 1
    assert not FailureEvent.objects.exists()


@pytest.mark.parametrize("lost", [LOST, 2.8, 2.2], ids=["3s", "2.8s", "2.2s"])
def test_nodes_silent_within_one_period_are_one_silence_when_the_deadlines_are_closer_than_a_period(
    settings: SettingsWrapper, lost: float
) -> None:
    """With the lost deadline less than a heartbeat period after the suspect one, the latest nodes of an
    outage are not past the suspect deadline yet when the earliest passes the lost one: they still count
    toward the mass silence, and the earliest is held, not lost."""
    settings.UNICRON_LOST_AFTER_S = lost
    settings.UNICRON_HEARTBEAT_INTERVAL_S = 1.0
    last = timezone.now() - timedelta(minutes=5)
    nodes = [NodeFactory(last_heartbeat_at=at(last, offset)) for offset in (0.0, 0.8, 0.85, 0.9)]

    sweep = sweep_node_health(now=at(last, lost + 0.05))

    assert (sweep.lost, sweep.held) == ([], [nodes[0].name])
    assert not FailureEvent.objects.exists()
    assert len(mass_alerts()) == 1


def test_held_nodes_are_declared_lost_past_the_mass_silence_bound_with_events_that_say_so() -> None:
    last = timezone.now() - timedelta(minutes=5)
    nodes = nodes_silent_since(last, 4)
    sweep_node_health(now=at(last, 5.0))

    sweep = sweep_node_health(now=at(last, MASS_LOST + 0.5))

    assert (sorted(sweep.lost), sweep.held) == (sorted(n.name for n in nodes), [])
    assert states(nodes) == ["lost"] * 4
    events = list(FailureEvent.objects.order_by("node__name"))
    assert [e.node_id for e in events] == [n.pk for n in sorted(nodes, key=lambda n: n.name)]
    for event in events:
        assert (event.kind, event.severity, event.action) == ("node_lost", "sev1", "isolate_and_replan")
        assert event.evidence["lost_after_s"] == MASS_LOST
        assert event.evidence["mass_silence"] == {"silent": 4, "watched": 4}
        assert "> 60s, mass silence: 4 of 4 nodes silent" in event.summary
    assert len(mass_alerts()) == 1  # the per-node loss alerts are the usual ones
    assert Alert.objects.exclude(message__startswith=MASS_SILENCE_ALERT_PREFIX).count() == 4


def test_a_new_silence_after_the_nodes_came_back_raises_a_new_alert() -> None:
    last = timezone.now() - timedelta(minutes=5)
    nodes = nodes_silent_since(last, 4)
    sweep_node_health(now=at(last, 5.0))
    assert len(mass_alerts()) == 1
    back = timezone.now()  # every agent heartbeats again (the agent link brings them back to healthy)
    Node.objects.filter(pk__in=[n.pk for n in nodes]).update(state="healthy", last_heartbeat_at=back)
    for node in nodes:
        last_seen.record(node.pk, back.timestamp())
    quiet = sweep_node_health(now=at(back, 1.0))
    assert (quiet.checked, quiet.held) == (0, [])
    assert len(mass_alerts()) == 1

    sweep = sweep_node_health(now=at(back, 5.0))

    assert (sweep.lost, len(sweep.held)) == ([], 4)
    assert len(mass_alerts()) == 2


def test_one_of_four_nodes_silent_past_lost_after_is_lost_as_before() -> None:
    last = timezone.now() - timedelta(minutes=5)
    [silent] = nodes_silent_since(last, 1)
    alive = nodes_silent_since(at(last, LOST), 3)

    sweep = sweep_node_health(now=at(last, LOST + 0.1))

    assert (sweep.lost, sweep.held) == ([silent.name], [])
    assert states([silent, *alive]) == ["lost", "healthy", "healthy", "healthy"]
    [event] = FailureEvent.objects.all()
    assert (event.evidence["lost_after_s"], event.evidence["mass_silence"]) == (LOST, None)
    assert "mass silence" not in event.summary
    assert mass_alerts() == []


def test_two_of_two_nodes_silent_are_lost_as_before_below_min_nodes() -> None:
    last = timezone.now() - timedelta(minutes=5)
    nodes = nodes_silent_since(last, 2)

    sweep = sweep_node_health(now=at(last, LOST + 0.1))

    assert (sorted(sweep.lost), sweep.held) == (sorted(n.name for n in nodes), [])
    assert states(nodes) == ["lost", "lost"]
    assert FailureEvent.objects.count() == 2
    assert mass_alerts() == []


def test_the_nodes_still_silent_when_most_are_back_stay_held_until_the_mass_silence_bound() -> None:
    """A restarted ASGI server's agents reconnect one by one: once some are back the others may no longer
    be "most", but they fell silent with the rest and are still judged by the longer deadline; a node
    that falls silent after the episode is judged by the usual one."""
    last = timezone.now() - timedelta(minutes=5)
    nodes = nodes_silent_since(last, 4)
    steady = nodes_silent_since(last, 3)  # heard all along
    late = NodeFactory(last_heartbeat_at=last)  # heard until after the episode was seen

    def heard(ns: list[Node], t: float) -> None:
        for n in ns:
            last_seen.record(n.pk, at(last, t).timestamp())

    heard([*steady, late], SUSPECT + 0.5)
    first = sweep_node_health(now=at(last, SUSPECT + 0.5))  # 4 of 8 silent: none past lost_after yet
    assert (first.lost, first.held, len(first.suspect)) == ([], [], 4)
    heard(nodes[:2], LOST)  # their agents reconnected: the link brings them back
    Node.objects.filter(pk__in=[n.pk for n in nodes[:2]]).update(state="healthy")
    heard([*nodes[:2], *steady], LOST + 1.0)

    sweep = sweep_node_health(now=at(last, LOST + 1.0))  # 2 of 8 silent: no longer a mass silence

    assert (sweep.lost, sorted(sweep.held)) == ([], sorted(n.name for n in nodes[2:]))
    assert states(nodes[2:]) == ["suspect", "suspect"]
    assert not FailureEvent.objects.exists()
    assert len(mass_alerts()) == 1

    heard([*nodes[:2], *steady], SUSPECT + 0.5 + LOST + 0.5)
    later = sweep_node_health(now=at(last, SUSPECT + 0.5 + LOST + 0.5))  # the late node: silent past it
    assert later.lost == [late.name]
    assert sorted(later.held) == sorted(n.name for n in nodes[2:])

    heard([*nodes[:2], *steady], MASS_LOST + 0.5)
    gone = sweep_node_health(now=at(last, MASS_LOST + 0.5))
    assert sorted(gone.lost) == sorted(n.name for n in nodes[2:])
    assert states(nodes[2:]) == ["lost", "lost"]
