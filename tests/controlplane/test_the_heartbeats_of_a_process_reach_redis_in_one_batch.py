"""The agent links of one ASGI process write their heartbeats to Redis together: one pipelined write for
every heartbeat that arrived within a flush interval, each node's newest time kept, and every link told
whether Redis took them (it stamps PostgreSQL when it did not)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence

import pytest
import redis

from controlplane.apps.fleet import last_seen
from controlplane.live.heartbeat_batch import HeartbeatBatch


async def test_a_thousand_heartbeats_are_one_write_with_each_nodes_newest_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writes: list[tuple[dict[int, float], list[tuple[float, float]]]] = []

    def record_many(
        times: Mapping[int, float], delays: Sequence[tuple[float, float]] = (), reader: str | None = None
    ) -> None:
        writes.append((dict(times), list(delays)))

    monkeypatch.setattr(last_seen, "record_many", record_many)
    batch = HeartbeatBatch()
    now = time.time()
    outcomes = [batch.add(node, now - 1.0, 0.01) for node in range(1000)]
    outcomes.append(batch.add(7, now, 0.02))  # a newer heartbeat of node 7 in the same batch
    outcomes.append(batch.add(7, now - 5.0, None))  # an older one does not win

    assert await asyncio.gather(*outcomes) == [True] * 1002
    [(times, delays)] = writes
    assert len(times) == 1000
    assert times[7] == now
    assert times[8] == now - 1.0
    assert sorted({d for d, _ in delays}) == [0.01, 0.02]
    assert len(delays) == 1001


async def test_a_batch_redis_refused_tells_every_link(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(
        times: Mapping[int, float], delays: Sequence[tuple[float, float]] = (), reader: str | None = None
    ) -> None:
        raise redis.ConnectionError("Connection refused")

    monkeypatch.setattr(last_seen, "record_many", refuse)
    batch = HeartbeatBatch()
    first, second = batch.add(1, time.time(), 0.0), batch.add(2, time.time(), 0.0)

    assert list(await asyncio.gather(first, second)) == [False, False]
