from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from controlplane.apps.fleet.services import do_rotate_node_token
from controlplane.live.agent_link import CLOSE_UNAUTHORIZED
from tests.e2e.conftest import AgentSocket, Connect, Registered

pytestmark = pytest.mark.django_db(transaction=True)


async def assert_refused(agent: AgentSocket) -> None:
    reply = await agent.receive()
    assert reply["message"]["type"] == "protocol_error"
    assert reply["message"]["code"] == "unauthorized"
    closing = await agent.comm.receive_output(timeout=3)
    assert closing["type"] == "websocket.close"
    assert closing["code"] == CLOSE_UNAUTHORIZED


async def test_an_unknown_token_is_refused_and_the_socket_closed(
    registered: Registered, connect: Connect
) -> None:
    agent = await connect("unode_not-a-real-token", registered.name)
    await assert_refused(agent)


async def test_a_missing_authorization_header_is_refused(registered: Registered, connect: Connect) -> None:
    agent = await connect(None, registered.name)
    await assert_refused(agent)


async def test_a_rotated_token_no_longer_opens_the_link(registered: Registered, connect: Connect) -> None:
    await database_sync_to_async(do_rotate_node_token)(None, registered.node)
    agent = await connect(registered.token, registered.name)
    await assert_refused(agent)
