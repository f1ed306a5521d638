"""Reports not confirmed by a pong go back to the front of the queue, in order."""

from __future__ import annotations

from agents.client import Outbox


async def test_unconfirmed_messages_are_requeued_in_order() -> None:
    box = Outbox()
    for m in ["a", "b", "c"]:
        box.put(m)
    for _ in range(2):
        box.sent(box.queue.popleft())  # a, b on the wire
    box.requeue_unconfirmed()
    assert list(box.queue) == ["a", "b", "c"]


async def test_confirmed_messages_are_forgotten() -> None:
    box = Outbox()
    for m in ["a", "b", "c"]:
        box.put(m)
    marks = [box.sent(box.queue.popleft()) for _ in range(3)]
    box.confirm(marks[1])
    box.requeue_unconfirmed()
    assert list(box.queue) == ["c"]


async def test_full_buffer_drops_the_oldest() -> None:
    box = Outbox(max_buffered=3)
    for m in range(5):
        box.put(m)
    assert list(box.queue) == [2, 3, 4]
    assert box.dropped == 2
