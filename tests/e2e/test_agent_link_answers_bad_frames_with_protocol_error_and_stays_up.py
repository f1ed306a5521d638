from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import Connect, Registered

pytestmark = pytest.mark.django_db(transaction=True)


async def test_bad_frames_get_a_protocol_error_naming_the_problem(
    registered: Registered, connect: Connect
) -> None:
    agent = await connect(registered.token, registered.name)

    await agent.send({"type": "heartbeat", "uptime_s": 1.0})
    before_hello = (await agent.receive())["message"]
    await agent.hello()
    await agent.send_raw("{not json")
    malformed = (await agent.receive())["message"]
    await agent.send_raw(json.dumps([1, 2, 3]))
    not_object = (await agent.receive())["message"]
    await agent.send({"type": "telepathy"})
    unknown = (await agent.receive())["message"]
    await agent.send({"type": "heartbeat", "uptime_s": 1.0}, protocol_version=99)
    version = (await agent.receive())["message"]
    await agent.send({"type": "heartbeat", "uptime_s": -5})
    invalid = (await agent.receive())["message"]

    assert (before_hello["code"], "first frame must be hello" in before_hello["detail"]) == ("invalid", True)
    assert malformed["code"] == "malformed"
    assert not_object["code"] == "malformed"
    assert unknown["code"] == "unknown_type"
    assert "telepathy" in unknown["detail"]
    assert version["code"] == "version_mismatch"
    assert version["supported_versions"] == [1]
    assert invalid["code"] == "invalid"
    assert "uptime_s" in invalid["detail"]
    await agent.heartbeat()
    await agent.settle()  # the link is still up and serving
