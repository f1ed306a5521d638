from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from channels.db import database_sync_to_async
from django.conf import settings
from django.utils import timezone

from controlplane.apps.fleet import last_seen
from controlplane.apps.fleet.models import Node
from controlplane.apps.incidents.models import Alert, FailureEvent
from controlplane.apps.incidents.node_health import sweep_node_health
from tests.controlplane.factories import NodeFactory
from tests.e2e.conftest import Connect, Registered

SUSPECT = settings.UNICRON_SUSPECT_AFTER_S
LOST = settings.UNICRON_LOST_AFTER_S


def state(node: Node) -> str:
    return Node.objects.get(pk=node.pk).state


@pytest.mark.django_db
def test_a_silent_node_becomes_suspect_then_lost_with_one_failure_event_and_alert() -> None:
    last = timezone.now()
    silent = NodeFactory(last_heartbeat_at=last)
    alive = NodeFactory(last_heartbeat_at=last + timedelta(seconds=LOST))

    early = sweep_node_health(now=last + timedelta(seconds=SUSPECT - 0.1))
    assert (early.suspect, early.lost, state(silent)) == ([], [], "healthy")

    sweep = sweep_node_health(now=last + timedelta(seconds=SUSPECT + 0.1))
    assert (sweep.suspect, sweep.lost, state(silent)) == ([silent.name], [], "suspect")
    assert not FailureEvent.objects.exists()

    sweep = sweep_node_health(now=last + timedelta(seconds=LOST + 0.1))
    assert (sweep.lost, state(silent), state(alive)) == ([silent.name], "lost", "healthy")
    again = sweep_node_health(now=last + timedelta(seconds=LOST + 0.5))  # a later tick
    assert again.lost == []

    [event] = FailureEvent.objects.all()
    assert (event.node_id, event.detector, event.kind, event.severity, event.action) == (
        silent.pk,
        "node_health",
        "node_lost",
        "sev1",
        "isolate_and_replan",
    )
    assert event.occurred_at == last
    [alert] = Alert.objects.all()
    assert (alert.source_event_id, alert.node_id, alert.severity) == (event.pk, silent.pk, "sev1")


@pytest.mark.django_db
def test_nodes_that_never_sent_a_heartbeat_or_are_drained_are_not_swept() -> None:
    long_ago = timezone.now() - timedelta(hours=1)
    NodeFactory(state="joining", last_heartbeat_at=None)
    NodeFactory(state="draining", last_heartbeat_at=long_ago)
    NodeFactory(state="isolated", last_heartbeat_at=long_ago)

    sweep = sweep_node_health()

    assert (sweep.checked, sweep.suspect, sweep.lost) == (0, [], [])


@pytest.mark.django_db(transaction=True)
async def test_a_closed_agent_socket_makes_the_node_suspect_at_once_and_lost_after_the_timeout(
    registered: Registered, connect: Connect
) -> None:
    agent = await connect(registered.token, registered.name)
    await agent.hello()
    await agent.heartbeat()
    await agent.settle()

    await agent.close()

    node = await database_sync_to_async(Node.objects.get)(pk=registered.node.pk)
    assert node.state == "suspect"
    assert node.last_heartbeat_at is not None
    heard = last_seen.last_seen([node.pk])[node.pk]  # its newest sign of life
    sweep = await database_sync_to_async(sweep_node_health)(
        now=datetime.fromtimestamp(heard, tz=UTC) + timedelta(seconds=LOST + 0.1)
    )
    assert sweep.lost == [registered.name]


@pytest.mark.django_db
def test_a_silent_node_is_swept_again_at_its_deadline_not_a_tick_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sweep that makes a node suspect names the moment it will be lost; when that comes before the
    next tick the task sweeps again then (once: a sweep at a deadline schedules none)."""
    from controlplane.apps.incidents import tasks

    last = timezone.now() - timedelta(seconds=LOST - 0.3)  # its deadline is 0.3 s away
    silent = NodeFactory(last_heartbeat_at=last)
    alive = NodeFactory(last_heartbeat_at=timezone.now())  # no deadline of its own
    last_seen.forget([silent.pk, alive.pk])  # (entries of earlier tests' nodes with these ids)
    last_seen.record_many({silent.pk: last.timestamp(), alive.pk: time.time()})
    scheduled: list[dict[str, object]] = []
    monkeypatch.setattr(tasks.check_node_health, "apply_async", lambda **options: scheduled.append(options))

    called = time.time()
    result = tasks.check_node_health()

    assert result["suspect"] == [silent.name]
    [follow_up] = scheduled
    assert follow_up["kwargs"] == {"at_deadline": True}
    due = last.timestamp() + LOST + tasks.DEADLINE_MARGIN_S - called
    assert 0 < float(str(follow_up["countdown"])) == pytest.approx(due, abs=0.1)
    assert tasks.check_node_health(at_deadline=True)["suspect"] == []  # nothing new, nothing scheduled
    assert len(scheduled) == 1

    sweep = sweep_node_health(now=last + timedelta(seconds=SUSPECT + 0.1))
    assert sweep.next_deadline_s == pytest.approx(last.timestamp() + LOST)
    assert sweep_node_health(now=last + timedelta(seconds=LOST + 0.01)).lost == [silent.name]
