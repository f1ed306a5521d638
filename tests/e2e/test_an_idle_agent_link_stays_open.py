"""An agent link that carries nothing for longer than Redis' default read timeout stays open.

redis-py 8 closes a connection idle for 5 s unless told otherwise, and channels-redis blocks for up to
5 s waiting on the channel layer: without the layer's socket_timeout every quiet socket was dropped."""

from __future__ import annotations

import asyncio

import pytest

from tests.e2e.conftest import Connect, Registered

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_link_idle_for_seven_seconds_still_answers(registered: Registered, connect: Connect) -> None:
    agent = await connect(registered.token, registered.name)
    await agent.hello()
    await agent.settle()

    await asyncio.sleep(7)

    assert await agent.comm.receive_nothing(timeout=0.1)  # no close frame arrived meanwhile
    await agent.heartbeat()
    await agent.settle()  # the consumer is alive and answers in order
