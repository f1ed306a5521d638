"""A cold start of a fleet queues every node's hello on the ASGI process's one database thread, so a
hello must cost one call there: the node's return to service and the outbox it is sent, read together.
A node with pending commands costs one more, after they went out (they are marked sent), on the process's
failure lane, not on the shared thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async

from controlplane.apps.fleet.choices import CommandType
from controlplane.apps.fleet.models import Node
from controlplane.apps.fleet.services import do_enqueue_command
from controlplane.live import agent_link
from tests.e2e.conftest import Connect, Registered

pytestmark = pytest.mark.django_db(transaction=True)


def _counting(monkeypatch: pytest.MonkeyPatch, name: str = "_db") -> list[str]:
    """The calls made through ``agent_link.<name>`` (``_db``: the shared thread; ``on_failure_lane``)."""
    calls: list[str] = []
    wrap = getattr(agent_link, name)

    def counted(fn: Callable[..., Any]) -> Any:
        calls.append(getattr(fn, "__name__", repr(fn)))
        return wrap(fn)

    monkeypatch.setattr(agent_link, name, counted)
    return calls


async def test_a_hello_costs_one_database_call(
    registered: Registered, connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = await connect(registered.token, registered.name)
    calls = _counting(monkeypatch)
    await agent.hello()
    await agent.settle()
    assert calls == ["_hello"]


async def test_pending_commands_cost_one_more_call_on_the_failure_lane_after_they_went_out(
    registered: Registered, connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = await database_sync_to_async(Node.objects.get)(pk=registered.node.pk)
    for _ in range(3):
        await database_sync_to_async(do_enqueue_command)(
            node, CommandType.STOP_WORKERS, {"task": 1, "grace_s": 1.0}
        )
    agent = await connect(registered.token, registered.name)
    calls = _counting(monkeypatch)
    lane = _counting(monkeypatch, "on_failure_lane")
    await agent.hello()
    got = [await agent.receive() for _ in range(3)]
    await agent.settle()
    assert [m["message"]["type"] for m in got] == ["stop_workers"] * 3
    assert calls == ["_hello"]
    assert lane == ["settle_sends"]
    states = await database_sync_to_async(
        lambda: sorted(node.commands.values_list("state", flat=True))  # type: ignore[attr-defined]
    )()
    assert states == ["sent"] * 3
