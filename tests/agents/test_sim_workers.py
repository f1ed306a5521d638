"""Simulated workers (no torch) report like real ones and react to the same drills."""

from __future__ import annotations

import signal

from agents.agent import Agent
from agents.testing import TestCoordinator
from agents.training.hook import EXIT_EXCEPTION
from controlplane.core.protocol import FaultSpec, InjectFaultCommand, ModelSpec
from tests.agents.helpers import launch, start_command

# big enough that the throughput model gives iterations of tens of milliseconds on an A100
MODEL = ModelSpec(layers=4, hidden=1024, heads=8, seq_len=1024, vocab=32000, micro_batch=1, global_batch=16)


async def _run(c: TestCoordinator, epoch: int = 1) -> None:
    ack = await c.command(
        "sim-a", start_command("t", epoch, launch(dp=2, model=MODEL, iterations=10**6), f"s{epoch}")
    )
    assert ack.outcome == "done"
    await c.wait_for(lambda: [r for _, r in c.reports("iteration_stats") if r.epoch == epoch], 10)


async def test_sim_workers_report_iterations_tokens_and_flops(
    coordinator: TestCoordinator, sim_agent: Agent
) -> None:
    await _run(coordinator)
    stats = [r.event for _, r in coordinator.reports("iteration_stats")]
    s = stats[0]
    assert s.iterations >= 1  # type: ignore[union-attr]
    # each rank reports its share of the iteration's tokens
    assert s.tokens == s.iterations * (16 * 1024 // 2)  # type: ignore[union-attr]
    assert s.model_flops > 0  # type: ignore[union-attr]
    assert 0.005 < s.median_s < 5  # type: ignore[union-attr]


async def test_sim_crash_and_exception_are_reported_like_real_ones(
    coordinator: TestCoordinator, sim_agent: Agent
) -> None:
    await _run(coordinator)
    await coordinator.command(
        "sim-a",
        InjectFaultCommand(command_id="f1", task_id="t", epoch=1, fault=FaultSpec(kind="crash", rank=0)),
    )
    await coordinator.command(
        "sim-a",
        InjectFaultCommand(command_id="f2", task_id="t", epoch=1, fault=FaultSpec(kind="exception", rank=1)),
    )
    await coordinator.wait_for(lambda: len(coordinator.reports("exited")) >= 2, 10)
    exits = {r.rank: r for _, r in coordinator.reports("exited")}
    assert exits[0].event.signal == signal.SIGKILL  # type: ignore[union-attr]
    assert exits[0].detector == "process_supervision"
    assert exits[1].event.exit_code == EXIT_EXCEPTION  # type: ignore[union-attr]
    exc = coordinator.reports("exception")[0][1]
    assert exc.detector == "exception_propagation"
    assert exc.rank == 1


async def test_sim_hang_is_found_by_the_monitor(coordinator: TestCoordinator, sim_agent: Agent) -> None:
    sim_agent.supervisor.cfg = sim_agent.supervisor.cfg.__class__(hang_floor_s=0.5)
    await _run(coordinator)
    # the monitor needs a few observed iterations (warm-up) before it has a threshold
    await coordinator.wait_for(
        lambda: sum(r.event.iterations for _, r in coordinator.reports("iteration_stats") if r.rank == 1)
        > 12,  # type: ignore[union-attr]
        20,
    )
    await coordinator.command(
        "sim-a",
        InjectFaultCommand(command_id="h", task_id="t", epoch=1, fault=FaultSpec(kind="hang", rank=1)),
    )
    hang = (await coordinator.wait_for(lambda: coordinator.reports("hang"), 10))[0][1]
    assert hang.rank == 1
    assert hang.detector == "statistical_monitoring"
    assert "all_reduce (hung)" in hang.event.stack  # type: ignore[union-attr]


async def test_only_the_first_and_last_ranks_report_every_second(
    coordinator: TestCoordinator, sim_agent: Agent
) -> None:
    """Rank 0 (rates) and the last rank (loss) report every interval; the others report once when their
    epoch starts (the resume step waits for every rank) and then every ten seconds: a node of 8 GPUs sends
    a few messages a second, not one per rank."""
    ack = await coordinator.command(
        "sim-a", start_command("q", 1, launch(dp=4, model=MODEL, iterations=10**6), "q1")
    )
    assert ack.outcome == "done"

    def per_rank() -> dict[int, int]:
        counts = dict.fromkeys(range(4), 0)
        for _, r in coordinator.reports("iteration_stats"):
            if r.task_id == "q":
                counts[r.rank] += 1
        return counts

    await coordinator.wait_for(lambda: per_rank()[0] >= 4 and per_rank()[3] >= 4, 30)
    counts = per_rank()
    assert counts[1] == counts[2] == 1, counts
