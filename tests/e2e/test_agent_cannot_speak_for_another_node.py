from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from controlplane.apps.accounts.models import AuditEntry
from controlplane.apps.fleet.models import Node
from tests.e2e.conftest import Connect, Register

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def snapshot(victim_pk: int) -> tuple[object, str, list[tuple[str, dict[str, object]]]]:
    victim = Node.objects.get(pk=victim_pk)
    audits = [(a.verb, a.after) for a in AuditEntry.objects.filter(verb="agent_impersonation_refused")]
    return victim.last_heartbeat_at, victim.state, audits


async def test_a_frame_for_another_node_is_refused_recorded_and_the_link_stays_up(
    register: Register, connect: Connect
) -> None:
    me = await database_sync_to_async(register)()
    victim = await database_sync_to_async(register)()
    agent = await connect(me.token, me.name)
    await agent.hello()
    await agent.settle()

    seq = await agent.send({"type": "heartbeat", "uptime_s": 3.0}, node=victim.name)
    reply = await agent.receive()
    await agent.send({"type": "heartbeat", "uptime_s": 3.0}, node=victim.name)
    await agent.receive()

    assert reply["message"]["code"] == "unauthorized"
    assert reply["message"]["in_reply_to_seq"] == seq
    assert victim.name in reply["message"]["detail"]
    last_heartbeat, state, audits = await snapshot(victim.node.pk)
    assert (last_heartbeat, state) == (None, "joining")  # nothing was done for the victim
    assert [verb for verb, _ in audits] == ["agent_impersonation_refused"]  # once per socket and node
    assert audits[0][1]["claimed_node"] == victim.name
    await agent.heartbeat()
    await agent.settle()  # still answering
