"""The agent's WebSocket link: Hello, heartbeats, auth, refusals, duplicates, fencing, reconnection."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

from agents.agent import Agent, AgentConfig
from agents.testing import TestCoordinator
from controlplane.core.protocol import DeviceInfo, ProtocolError, StopWorkersCommand
from tests.agents.helpers import launch, start_command


async def test_hello_carries_the_device_inventory(coordinator: TestCoordinator, sim_agent: Agent) -> None:
    hello = coordinator.messages("hello", "sim-a")[0].envelope
    assert hello.protocol_version == 1
    assert hello.seq == 0
    assert hello.message.devices == [  # type: ignore[union-attr]
        DeviceInfo(
            index=i, kind="cpu", name=f"cpu-slot-{i}", memory_bytes=hello.message.devices[i].memory_bytes
        )  # type: ignore[union-attr]
        for i in range(4)
    ]
    assert hello.message.worker_kind == "sim"  # type: ignore[union-attr]


async def test_heartbeats_arrive_every_second(coordinator: TestCoordinator, sim_agent: Agent) -> None:
    await coordinator.wait_for(lambda: len(coordinator.messages("heartbeat")) >= 3, 5)
    times = [r.at for r in coordinator.messages("heartbeat")]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(0.7 < g < 1.3 for g in gaps), gaps
    seqs = [r.envelope.seq for r in coordinator.received]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)


async def test_agent_without_valid_token_is_refused(tmp_path: Path) -> None:
    async with TestCoordinator(tokens={"good": "n"}) as c:
        agent = Agent(
            AgentConfig(
                coordinator=c.url, token="bad", devices=1, worker_kind="sim", node="n", run_dir=tmp_path
            )
        )
        task = asyncio.ensure_future(agent.run())
        await asyncio.sleep(1.0)
        assert c.received == []
        assert agent.client.connections == 0
        task.cancel()


async def test_malformed_frame_gets_an_error_reply_and_the_link_stays_up(
    coordinator: TestCoordinator, sim_agent: Agent
) -> None:
    await coordinator.send("sim-a", None, raw="{not json")
    await coordinator.send(
        "sim-a",
        None,
        raw=json.dumps(
            {
                "protocol_version": 1,
                "node": "coordinator",
                "session": "x",
                "seq": 99,
                "message": {"type": "frobnicate"},
            }
        ),
    )
    errors = await coordinator.wait_for(
        lambda: len(coordinator.messages("protocol_error")) >= 2 and coordinator.messages("protocol_error"), 5
    )
    codes = [e.envelope.message.code for e in errors]  # type: ignore[union-attr]
    assert codes == ["malformed", "unknown_type"]
    assert "frobnicate" in errors[1].envelope.message.detail  # type: ignore[union-attr]
    assert errors[1].envelope.message.in_reply_to_seq == 99  # type: ignore[union-attr]
    ack = await coordinator.command("sim-a", StopWorkersCommand(command_id="after", task_id="t", epoch=0), 5)
    assert ack.outcome == "done"
    assert sim_agent.client.connections == 1


async def test_version_mismatch_is_refused_clearly(coordinator: TestCoordinator, sim_agent: Agent) -> None:
    frame = {
        "protocol_version": 7,
        "node": "coordinator",
        "session": "x",
        "seq": 5,
        "message": {"type": "drain"},
    }
    await coordinator.send("sim-a", None, raw=json.dumps(frame))
    errors = await coordinator.wait_for(lambda: coordinator.messages("protocol_error"), 5)
    err = errors[0].envelope.message
    assert isinstance(err, ProtocolError)
    assert err.code == "version_mismatch"
    assert err.supported_versions == [1]
    assert sim_agent.client.connections == 1


async def test_duplicate_and_stale_commands_are_acked_but_not_executed(
    coordinator: TestCoordinator, sim_agent: Agent
) -> None:
    cmd = start_command("t", 3, launch(iterations=10_000), "start-3")
    assert (await coordinator.command("sim-a", cmd)).outcome == "done"
    pids_before = [w.handle for w in sim_agent.supervisor.groups["t"].workers.values()]
    await coordinator.send("sim-a", cmd)
    await coordinator.wait_for(lambda: len(coordinator.messages("ack")) >= 2, 5)
    assert coordinator.messages("ack")[1].envelope.message.outcome == "duplicate"  # type: ignore[union-attr]
    assert [w.handle for w in sim_agent.supervisor.groups["t"].workers.values()] == pids_before
    stale = await coordinator.command("sim-a", start_command("t", 2, launch(iterations=10), "start-2"))
    assert stale.outcome == "stale_epoch"
    assert sim_agent.supervisor.groups["t"].spec.epoch == 3


async def test_reports_made_while_disconnected_are_delivered_after_reconnect(tmp_path: Path) -> None:
    c = await TestCoordinator().start()
    port = c.port
    agent = Agent(
        AgentConfig(coordinator=c.url, token="t", devices=2, worker_kind="sim", node="n", run_dir=tmp_path)
    )
    task = asyncio.ensure_future(agent.run())
    await c.wait_for(lambda: c.messages("hello"), 10)
    await c.command("n", start_command("t", 1, launch(iterations=10**9), "go"))
    await c.wait_for(lambda: c.reports("iteration_stats"), 5)
    await c.stop()  # coordinator gone: the agent buffers
    await asyncio.sleep(2.5)
    assert len(agent.outbox) > 0
    c2 = await TestCoordinator(port=port).start()
    try:
        await c2.wait_for(lambda: c2.messages("hello"), 15)
        await c2.wait_for(lambda: len(c2.reports("iteration_stats")) >= 4, 10)
        assert agent.client.connections == 2
        # Per rank, the iteration ranges seen by the two coordinators leave no gap: what happened
        # while no coordinator was there arrived after the reconnect.
        for rank in (0, 1):
            spans = sorted(
                (r.event.first_iteration, r.event.last_iteration)  # type: ignore[union-attr]
                for coord in (c, c2)
                for _, r in coord.reports("iteration_stats")
                if r.rank == rank
            )
            assert spans[0][0] == 0
            for (_, last), (first, _) in itertools.pairwise(spans):
                assert first <= last + 1, spans
    finally:
        await agent.client.stop()
        task.cancel()
        await c2.stop()
