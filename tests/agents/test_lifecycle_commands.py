"""StopWorkers, Reconfigure, Retry, Drain and the local drill CLI, on simulated workers."""

from __future__ import annotations

import asyncio

from agents.agent import Agent
from agents.drill import main as drill_main
from agents.testing import TestCoordinator
from controlplane.core.protocol import (
    DrainCommand,
    ModelSpec,
    ReconfigureCommand,
    Rendezvous,
    RetryCommand,
    StopWorkersCommand,
)
from tests.agents.helpers import free_port, launch, start_command

MODEL = ModelSpec(layers=4, hidden=1024, heads=8, seq_len=1024, vocab=32000, micro_batch=1, global_batch=16)


async def _start(c: TestCoordinator, epoch: int = 1, dp: int = 2) -> None:
    ack = await c.command(
        "sim-a", start_command("t", epoch, launch(dp=dp, model=MODEL, iterations=10**6), f"s{epoch}")
    )
    assert ack.outcome == "done", ack


async def test_stop_workers_is_an_expected_exit(coordinator: TestCoordinator, sim_agent: Agent) -> None:
    await _start(coordinator)
    ack = await coordinator.command(
        "sim-a", StopWorkersCommand(command_id="stop", task_id="t", epoch=1, ranks=[1])
    )
    assert ack.outcome == "done"
    exits = [r for _, r in coordinator.reports("exited")]
    assert [(r.rank, r.event.expected, r.detector) for r in exits] == [(1, True, None)]  # type: ignore[union-attr]
    assert sim_agent.supervisor.groups["t"].workers[0].state.is_running


async def test_reconfigure_replaces_the_workers_under_a_new_epoch(
    coordinator: TestCoordinator, sim_agent: Agent
) -> None:
    await _start(coordinator)
    new = launch(dp=4, model=MODEL, iterations=10**6)
    ack = await coordinator.command(
        "sim-a", ReconfigureCommand(command_id="re", task_id="t", epoch=2, launch=new)
    )
    assert ack.outcome == "done", ack
    assert "[0, 1, 2, 3]" in ack.detail
    old_exits = [r for _, r in coordinator.reports("exited") if r.epoch == 1]
    assert len(old_exits) == 2
    assert all(r.event.expected for r in old_exits)  # type: ignore[union-attr]
    started = [r for _, r in coordinator.reports("started") if r.epoch == 2]
    assert sorted(r.rank for r in started) == [0, 1, 2, 3]
    hb = await coordinator.wait_for(
        lambda: [m for m in coordinator.messages("heartbeat") if len(m.envelope.message.workers) == 4],
        5,  # type: ignore[union-attr]
    )
    assert {w.epoch for w in hb[-1].envelope.message.workers} == {2}  # type: ignore[union-attr]


async def test_retry_relaunches_the_same_ranks_at_a_new_rendezvous(
    coordinator: TestCoordinator, sim_agent: Agent
) -> None:
    await _start(coordinator)
    port = free_port()
    rdzv = Rendezvous(master_addr="127.0.0.1", master_port=port)
    ack = await coordinator.command(
        "sim-a", RetryCommand(command_id="r", task_id="t", epoch=2, rendezvous=rdzv)
    )
    assert ack.outcome == "done", ack
    group = sim_agent.supervisor.groups["t"]
    assert group.spec.epoch == 2
    assert group.spec.launch.rendezvous.master_port == port
    assert sorted(group.workers) == [0, 1]


async def test_drain_stops_everything_and_refuses_new_work(
    coordinator: TestCoordinator, sim_agent: Agent
) -> None:
    await _start(coordinator)
    ack = await coordinator.command("sim-a", DrainCommand(command_id="d", grace_s=1.0))
    assert ack.outcome == "done"
    assert len(coordinator.reports("exited")) == 2
    refused = await coordinator.command(
        "sim-a", start_command("t", 3, launch(dp=2, model=MODEL, iterations=10), "after-drain")
    )
    assert refused.outcome == "rejected"
    assert "draining" in refused.detail


async def test_unknown_device_is_rejected(coordinator: TestCoordinator, sim_agent: Agent) -> None:
    ack = await coordinator.command("sim-a", start_command("t", 1, launch(dp=8, model=MODEL), "too-big"))
    assert ack.outcome == "rejected"
    assert "do not exist" in ack.detail


async def test_drill_cli_injects_through_the_local_socket(
    coordinator: TestCoordinator, sim_agent: Agent
) -> None:
    await _start(coordinator)
    sock = str(sim_agent.supervisor.socket_path)
    argv = ["--socket", sock, "--task", "t", "--kind", "crash", "--rank", "1"]
    rc = await asyncio.get_running_loop().run_in_executor(None, drill_main, argv)
    assert rc == 0
    exits = await coordinator.wait_for(lambda: coordinator.reports("exited"), 5)
    assert exits[0][1].rank == 1
    assert exits[0][1].detector == "process_supervision"
    bad = await asyncio.get_running_loop().run_in_executor(
        None, drill_main, ["--socket", sock, "--task", "nope", "--kind", "hang", "--rank", "0"]
    )
    assert bad == 1
