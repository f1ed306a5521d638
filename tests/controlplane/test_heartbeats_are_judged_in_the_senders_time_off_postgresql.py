"""Liveness lives in Redis (``fleet.last_seen``) in the time the agent sent each heartbeat: a sweep reads
the silent nodes by score, a node Redis lost is judged from the sweep on (never forgotten, never lost at
once), and the agent link's queueing delay is measured, exported and alerted on."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.apps.fleet import last_seen
from controlplane.apps.fleet.models import Node
from controlplane.apps.incidents.models import Alert
from controlplane.apps.incidents.node_health import (
    LINK_BACKLOG_ALERT_PREFIX,
    check_link_backlog,
    sweep_node_health,
)
from controlplane.apps.metrics.exposition import render_exposition
from tests.controlplane.factories import NodeFactory

LOST = 3.0


def test_a_link_learns_its_agents_clock_and_measures_the_queue() -> None:
    clock = last_seen.SenderClock()
    # an agent whose clock is an hour behind, its first frame delivered in 5 ms
    when, delay = clock.place(sent=1000.0, received=4600.005)
    assert (when, delay) == pytest.approx((4600.005, 0.0))
    # a frame it sent 1 s later reached the server 7 s late: it is placed when it was sent
    when, delay = clock.place(sent=1001.0, received=4608.005)
    assert when == pytest.approx(4601.005)
    assert delay == pytest.approx(7.0)
    # a faster delivery tightens the offset; a frame is never placed after its arrival
    when, delay = clock.place(sent=1010.0, received=4610.002)
    assert when == pytest.approx(4610.002)
    assert clock.offset == pytest.approx(3600.002)


@pytest.mark.django_db
def test_a_sweep_reads_only_the_silent_nodes_and_drops_the_unwatched() -> None:
    now = timezone.now()
    fresh = NodeFactory(last_heartbeat_at=now)
    silent = NodeFactory(last_heartbeat_at=now - timedelta(seconds=LOST + 1))
    gone = NodeFactory(last_heartbeat_at=now - timedelta(seconds=LOST + 1), state="isolated")

    sweep = sweep_node_health(now=now)

    assert (sweep.checked, sweep.lost) == (1, [silent.name])
    assert Node.objects.get(pk=fresh.pk).state == "healthy"
    assert Node.objects.get(pk=silent.pk).last_heartbeat_at == now - timedelta(seconds=LOST + 1)
    assert gone.pk not in last_seen.last_seen([gone.pk])  # back with its next heartbeat


@pytest.mark.django_db
def test_a_node_redis_lost_is_judged_from_the_sweep_on() -> None:
    node = NodeFactory(last_heartbeat_at=timezone.now())
    last_seen.forget([node.pk])  # Redis restarted: the entry is gone
    now = timezone.now()

    assert sweep_node_health(now=now).checked == 0  # not lost at once
    assert node.pk in last_seen.last_seen([node.pk])
    later = sweep_node_health(now=now + timedelta(seconds=LOST + 1))
    assert later.lost == [node.name]  # and not forgotten


@pytest.mark.django_db
def test_a_backlogged_link_is_exported_and_alerted_once() -> None:
    for delay in [0.01] * 90 + [4.0] * 10:
        last_seen.record(NodeFactory().pk, timezone.now().timestamp(), delay)

    measured = last_seen.link_delay()
    assert measured is not None
    assert measured.samples == 100
    assert measured.p50_s == pytest.approx(0.01)
    assert measured.p99_s == pytest.approx(4.0)
    text = render_exposition().decode()
    assert 'unicron_agent_link_delay_seconds{quantile="0.99"} 4.0' in text

    assert check_link_backlog() is True
    assert check_link_backlog() is False  # one alert while it lasts
    (alert,) = Alert.objects.filter(message__startswith=LINK_BACKLOG_ALERT_PREFIX)
    assert "4.00s" in alert.message


@pytest.mark.django_db
def test_a_quick_link_raises_no_alert() -> None:
    for _ in range(50):
        last_seen.record(NodeFactory().pk, timezone.now().timestamp(), 0.02)
    assert check_link_backlog() is False
    assert not Alert.objects.filter(message__startswith=LINK_BACKLOG_ALERT_PREFIX).exists()


@pytest.mark.django_db
def test_a_silence_the_links_own_backlog_explains_is_no_verdict() -> None:
    """The link reads heartbeats 4 s late (a cold start of a fleet on a saturated ASGI process): a node
    whose newest heartbeat read is 3.5 s old is waiting to be read, not silent; once the link keeps up,
    the same silence is a verdict."""
    now = timezone.now()
    waiting = NodeFactory(last_heartbeat_at=now - timedelta(seconds=3.5))
    for _ in range(20):  # heartbeats of other nodes read just now, sent 4 s ago
        last_seen.record(NodeFactory(last_heartbeat_at=now).pk, now.timestamp() - 4.0 + 0.5, 4.0)

    behind = sweep_node_health(now=now)

    assert waiting.name not in behind.suspect + behind.lost
    assert Node.objects.get(pk=waiting.pk).state == "healthy"

    last_seen.liveness_redis().delete(last_seen.DELAY_KEY)  # the link keeps up again
    caught_up = sweep_node_health(now=now)
    assert waiting.name in caught_up.lost


@pytest.mark.django_db
def test_one_process_reading_late_holds_the_verdicts_though_the_others_keep_up() -> None:
    """Two ASGI processes read the links: one keeps up (950 heartbeats read at once), the other reads 4 s
    late (50). Together their delays' 90th percentile is the quick one's; judged per process, the silence
    of a node whose heartbeats wait in the late process is its backlog, not a verdict."""
    now = timezone.now()
    waiting = NodeFactory(last_heartbeat_at=now - timedelta(seconds=3.5))
    quick = [(0.01, now.timestamp())] * 950
    late = [(4.0, now.timestamp())] * 50
    last_seen.record_many({NodeFactory(last_heartbeat_at=now).pk: now.timestamp()}, quick, "web-1:1")
    last_seen.record_many({NodeFactory(last_heartbeat_at=now).pk: now.timestamp() - 3.5}, late, "web-2:2")

    behind = sweep_node_health(now=now)

    assert waiting.name not in behind.suspect + behind.lost
    last_seen.liveness_redis().delete(last_seen.reader_delay_key("web-2:2"))  # it caught up
    caught_up = sweep_node_health(now=now)
    assert waiting.name in caught_up.lost
