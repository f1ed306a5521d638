"""The agent link runs in several ASGI processes: agents spread over two daphne servers (as a load
balancer would spread them), a task placed across nodes of both starts, because the command wake-ups go
through the channel layer to whichever process holds each node's socket; and a node whose server dies
reconnects to the other one and its next commands reach it there."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.apps.fleet.models import AgentCommand
from controlplane.apps.training.models import Allocation
from tests.e2e.loop import AsgiServer, Loop, assert_allocations_consistent, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_a_task_across_two_asgi_servers_runs_and_survives_one_of_them(loop: Loop, tmp_path: Path) -> None:
    assert loop.asgi is not None
    second = AsgiServer(free_port(), dict(loop.asgi.env), tmp_path / "daphne-2.log")
    second.start()
    try:
        first_url = loop.ws_url
        a = loop.add_node(2)
        loop.ws_url = second.url
        b = loop.add_node(2)
        loop.wait_nodes_healthy(2)

        task = loop.submit("across", min_workers=4, max_workers=4)
        started = loop.wait_running(task)
        nodes = set(Allocation.objects.filter(task=task, active=True).values_list("device__node", flat=True))
        assert nodes == {a.pk, b.pk}
        acked = AgentCommand.objects.filter(task=task, state="acked")
        assert set(acked.values_list("node", flat=True)) == {a.pk, b.pk}

        # the second server dies: its agent comes back through the first one (a restarted agent pointed
        # at the surviving server, as a load balancer would send it) and the task runs on, re-planned
        second.kill()
        loop.kill_agent(b.name)
        loop.ws_url = first_url
        loop.start_agent(b.name, 2)
        loop.wait_nodes_healthy(2, timeout=90)
        loop.wait_running(task, epoch_above=started.epoch, timeout=120)
        assert_allocations_consistent()
    finally:
        second.stop()
