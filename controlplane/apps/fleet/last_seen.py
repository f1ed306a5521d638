"""When each node was last heard from, kept off PostgreSQL: a Redis sorted set.

A heartbeat (1 Hz per node) is the hottest message on the agent link. Writing each one into PostgreSQL
cost a connection, a commit and a WAL flush per node per second, and capped the fleet at ~150 nodes on a
2-core machine. Here a heartbeat is one ``ZADD`` into :data:`LAST_SEEN_KEY` (member: the node's id;
score: the time the agent *sent* it, on the control plane's clock, see :func:`sender_time`). PostgreSQL
is written only when a node's state changes (``Node.last_heartbeat_at`` is stamped then, and at hello).

The health watchdog reads the set by score (``ZRANGEBYSCORE -inf cutoff``): a sweep costs O(silent
nodes), not O(nodes). A node that leaves the watched states (lost, isolated, deleted) is dropped from the
set by the sweep and comes back with its next heartbeat. The set is rebuilt from PostgreSQL when Redis
lost it (a restart of an embedded Redis keeps nothing): :func:`backfill` gives every watched node that is
missing its ``last_heartbeat_at``, so a node is never forgotten, only judged by its older stamp.

**The sender's time.** A heartbeat that waited in a saturated link's queue says nothing about *now*:
stamping it when the server got round to it (as before) made a 23 s backlog look like a healthy fleet and
a dead node's loss took 34.8 s to see. Each link learns the agent's clock offset as the smallest
``received - sent`` it has seen (:class:`SenderClock`: the offset plus the fastest delivery), so a
frame's time is ``sent + offset`` — never later than its arrival — and ``arrival - that`` is the link's
queueing delay, sampled into :data:`DELAY_KEY` for the metrics and the watchdog's alert.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import cast

import redis
from django.conf import settings

log = logging.getLogger(__name__)

LAST_SEEN_KEY = "unicron:liveness:last-seen"
"""Sorted set: node id → the time (unix seconds, control-plane clock) of its newest heartbeat."""
DELAY_KEY = "unicron:liveness:link-delay"
"""List of the agent link's latest queueing delays (seconds, newest first), :data:`DELAY_SAMPLES` long."""
DELAY_SAMPLES = 4096
READERS_KEY = "unicron:liveness:readers"
"""Hash: each process that reads agent links (``host:pid``) → when it last wrote a batch of heartbeats. Its
own latest delays are the list ``<DELAY_KEY>:<reader>`` (:func:`reader_delay_key`): one process that falls
behind is seen as behind, not averaged away by the others' quick reads."""
READER_DELAY_SAMPLES = 1024
READER_FORGOTTEN_AFTER_S = 60
"""A reader that wrote nothing for this long is gone (its list expires with it)."""
MASS_SILENCE_KEY = "unicron:liveness:mass-silence"
"""The latest mass silence the health watchdog saw (JSON of :class:`MassSilenceSeen`), while it lasts."""
LIVENESS_KEYS = (LAST_SEEN_KEY, DELAY_KEY, READERS_KEY, MASS_SILENCE_KEY)


@cache
def liveness_redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2.0, socket_connect_timeout=2.0)


@dataclass
class SenderClock:
    """One link's estimate of its agent's clock: ``offset`` = the smallest ``received - sent`` seen on the
    link (the clock difference plus the fastest delivery), so ``sent + offset`` is when a frame would have
    arrived with no queue in front of it."""

    offset: float | None = None

    def place(self, sent: float, received: float) -> tuple[float, float]:
        """(the frame's time on the control plane's clock, the queueing delay it met)."""
        observed = received - sent
        if self.offset is None or observed < self.offset:
            self.offset = observed
        when = min(sent + self.offset, received)
        return when, received - when


def record(node_id: int, when: float, delay: float | None = None) -> None:
    """A heartbeat of ``node_id`` sent at ``when``: one pipelined round trip (an older time never replaces
    a newer one: ``ZADD GT``)."""
    pipe = liveness_redis().pipeline(transaction=False)
    pipe.zadd(LAST_SEEN_KEY, {str(node_id): when}, gt=True)
    if delay is not None:
        pipe.lpush(DELAY_KEY, f"{delay:.4f}@{time.time():.3f}")
        pipe.ltrim(DELAY_KEY, 0, DELAY_SAMPLES - 1)
    pipe.execute()


def reader_delay_key(reader: str) -> str:
    return f"{DELAY_KEY}:{reader}"


def record_many(
    times: Mapping[int, float], delays: Sequence[tuple[float, float]] = (), reader: str | None = None
) -> None:
    """Heartbeats of many nodes in one pipelined round trip: node id → its newest time, and the queueing
    delays measured with the time each was read (``(delay, read at)``), also under ``reader`` (the process
    that read them) when given."""
    pipe = liveness_redis().pipeline(transaction=False)
    if times:
        pipe.zadd(LAST_SEEN_KEY, {str(node_id): when for node_id, when in times.items()}, gt=True)
    if delays:
        entries = [f"{delay:.4f}@{read_at:.3f}" for delay, read_at in delays]
        pipe.lpush(DELAY_KEY, *entries)
        pipe.ltrim(DELAY_KEY, 0, DELAY_SAMPLES - 1)
        if reader:
            key = reader_delay_key(reader)
            pipe.lpush(key, *entries)
            pipe.ltrim(key, 0, READER_DELAY_SAMPLES - 1)
            pipe.expire(key, READER_FORGOTTEN_AFTER_S)
            pipe.hset(READERS_KEY, reader, f"{time.time():.3f}")
    pipe.execute()


def seen_before(cutoff: float) -> dict[int, float]:
    """Nodes whose newest heartbeat is older than ``cutoff`` (unix seconds): id → its time."""
    rows = cast(
        "list[tuple[bytes, float]]",
        liveness_redis().zrangebyscore(LAST_SEEN_KEY, "-inf", f"({cutoff}", withscores=True),
    )
    return {int(member): float(score) for member, score in rows}


def last_seen(node_ids: Iterable[int]) -> dict[int, float]:
    """The newest heartbeat of each of ``node_ids`` that has one in the set."""
    ids = list(node_ids)
    if not ids:
        return {}
    scores = liveness_redis().zmscore(LAST_SEEN_KEY, [str(i) for i in ids])
    return {i: float(s) for i, s in zip(ids, scores, strict=True) if s is not None}


def seen_since(cutoff: float) -> list[int]:
    """Nodes heard from at ``cutoff`` or later."""
    members = cast("list[bytes]", liveness_redis().zrangebyscore(LAST_SEEN_KEY, cutoff, "+inf"))
    return [int(m) for m in members]


def last_seen_or_none(node_ids: Iterable[int]) -> dict[int, float] | None:
    """:func:`last_seen`, or None when Redis cannot be reached (readers fall back to
    ``Node.last_heartbeat_at``)."""
    try:
        return last_seen(node_ids)
    except redis.RedisError as exc:
        log.warning("heartbeat times not read from Redis: %s", exc)
        return None


def forget(node_ids: Iterable[int]) -> None:
    ids = [str(i) for i in node_ids]
    if ids:
        liveness_redis().zrem(LAST_SEEN_KEY, *ids)


def tracked() -> int:
    return int(liveness_redis().zcard(LAST_SEEN_KEY))


def backfill(stamps: Mapping[int, float]) -> int:
    """Give the nodes of ``stamps`` (id → ``last_heartbeat_at``) that have no entry one (``ZADD NX``);
    returns how many were missing."""
    if not stamps:
        return 0
    added = liveness_redis().zadd(LAST_SEEN_KEY, {str(i): t for i, t in stamps.items()}, nx=True)
    return int(cast(int, added))


@dataclass(frozen=True)
class MassSilenceSeen:
    """A mass silence as the watchdog last saw it: ``silent`` of ``watched`` nodes, those last heard before
    ``silent_before`` (unix seconds), to be declared lost only past ``lost_after_s``."""

    silent_before: float
    silent: int
    watched: int
    lost_after_s: float


def note_mass_silence(seen: MassSilenceSeen) -> None:
    """Remember the episode for as long as its nodes may be held (every sweep that sees it renews it)."""
    liveness_redis().set(
        MASS_SILENCE_KEY, json.dumps(dataclasses.asdict(seen)), px=int(seen.lost_after_s * 1000) + 1
    )


def mass_silence_seen() -> MassSilenceSeen | None:
    raw = liveness_redis().get(MASS_SILENCE_KEY)
    if raw is None:
        return None
    try:
        return MassSilenceSeen(**json.loads(raw))
    except (TypeError, ValueError):
        return None  # not ours: judged as if none was seen


@dataclass(frozen=True)
class LinkDelay:
    samples: int
    p50_s: float
    p99_s: float
    max_s: float


def _delay_of(entry: bytes | str) -> tuple[float, float]:
    """(delay, when it was read) of one :data:`DELAY_KEY` entry ``"<delay>@<read at>"``."""
    text = entry.decode() if isinstance(entry, bytes) else entry
    delay, _, read_at = text.partition("@")
    return float(delay), float(read_at or 0.0)


def recent_delays_by_reader(now_s: float, window_s: float, samples: int = 1024) -> list[list[float]]:
    """The queueing delays of the heartbeats read in the last ``window_s``: one list per process that reads
    agent links (of its newest :data:`READER_DELAY_SAMPLES`), and one of every process's together (of the
    newest ``samples``; writes that name no reader are there only). Readers gone quiet for
    :data:`READER_FORGOTTEN_AFTER_S` are forgotten."""
    client = liveness_redis()
    readers = {
        (name.decode() if isinstance(name, bytes) else str(name)): float(at)
        for name, at in cast("dict[bytes, bytes]", client.hgetall(READERS_KEY)).items()
    }
    gone = [name for name, at in readers.items() if at < now_s - READER_FORGOTTEN_AFTER_S]
    pipe = client.pipeline(transaction=False)
    if gone:
        pipe.hdel(READERS_KEY, *gone)
    pipe.lrange(DELAY_KEY, 0, samples - 1)
    live = [name for name in readers if name not in gone]
    for name in live:
        pipe.lrange(reader_delay_key(name), 0, READER_DELAY_SAMPLES - 1)
    replies = pipe.execute()[1 if gone else 0 :]
    since = now_s - window_s
    return [[delay for delay, read_at in map(_delay_of, raw) if read_at >= since] for raw in replies]


def link_delay() -> LinkDelay | None:
    """The agent link's queueing delay over its latest :data:`DELAY_SAMPLES` heartbeats."""
    raw = liveness_redis().lrange(DELAY_KEY, 0, DELAY_SAMPLES - 1)
    values = sorted(_delay_of(v)[0] for v in raw)
    if not values:
        return None
    if len(values) == 1:
        return LinkDelay(1, values[0], values[0], values[0])
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return LinkDelay(len(values), cuts[49], cuts[98], values[-1])
