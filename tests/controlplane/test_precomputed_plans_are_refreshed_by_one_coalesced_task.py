"""The precomputed failure-time plans are refreshed by a task of their own, not inside the failure handling
that asked for them (at 2,048 nodes a refresh is some 25 s, and inline it held the Celery process the
node-health sweeps needed), and the requests of a burst are coalesced: at most one refresh queued or
running, and a request made while one runs queues one more, behind the tasks queued meanwhile."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controlplane.apps.common.triggers import orchestration_redis
from controlplane.apps.planning import precomputed


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    client = orchestration_redis()
    client.delete(precomputed.REFRESH_WANTED_KEY, precomputed.REFRESH_QUEUED_KEY)
    messages: list[int] = []
    monkeypatch.setattr(precomputed, "send_precomputed_refresh", lambda: messages.append(1))
    yield messages
    client.delete(precomputed.REFRESH_WANTED_KEY, precomputed.REFRESH_QUEUED_KEY)


def test_a_burst_of_requests_sends_one_message(sent: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    refreshed: list[int] = []
    monkeypatch.setattr(precomputed, "refresh_precomputed", lambda: refreshed.append(1))
    for _ in range(5):
        precomputed.request_precomputed_refresh()
    assert sent == [1]
    assert refreshed == []  # nothing is computed by the caller

    assert precomputed.do_refresh_precomputed() is False  # nothing asked for meanwhile
    precomputed.request_precomputed_refresh()  # after the refresh: a new one is queued
    assert sent == [1, 1]


def test_a_request_made_during_a_refresh_queues_one_more_behind_the_others(
    sent: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    states: list[str] = []

    def refresh() -> None:
        states.append(f"state {len(states)}")
        if len(states) == 1:  # a decision committed while the first refresh ran
            precomputed.request_precomputed_refresh()

    monkeypatch.setattr(precomputed, "refresh_precomputed", refresh)
    precomputed.request_precomputed_refresh()
    assert sent == [1]
    assert precomputed.do_refresh_precomputed() is True  # asked for meanwhile: one more message, queued
    assert sent == [1, 1]  # by the refresh itself; the request during it sent none
    assert precomputed.do_refresh_precomputed() is False
    assert states == ["state 0", "state 1"]
    assert not orchestration_redis().exists(precomputed.REFRESH_QUEUED_KEY)


def test_without_redis_the_request_refreshes_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import redis

    class Down:
        def set(self, *args: object, **kwargs: object) -> None:
            raise redis.ConnectionError("unreachable")

    refreshed: list[int] = []
    monkeypatch.setattr(precomputed, "orchestration_redis", lambda: Down())
    monkeypatch.setattr(precomputed, "refresh_precomputed", lambda: refreshed.append(1))
    precomputed.request_precomputed_refresh()
    assert refreshed == [1]
