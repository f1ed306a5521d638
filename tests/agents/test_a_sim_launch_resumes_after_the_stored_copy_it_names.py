"""A simulated rank launched with a stored copy as its state source (a task relaunched from its newest
checkpoint or an in-memory snapshot) resumes after that copy's iteration, as a real worker that loads
its checkpoint does, instead of training from iteration 0 again; a launch with no source starts at 0."""

from __future__ import annotations

from agents.agent import Agent
from agents.testing import TaskDriver, TestCoordinator
from controlplane.core.protocol import IterationStats, ModelSpec, StateSource
from tests.agents.helpers import launch

MODEL = ModelSpec(layers=4, hidden=1024, heads=8, seq_len=1024, vocab=32000, micro_batch=1, global_batch=16)


def _first_iterations(d: TaskDriver) -> list[int]:
    return [
        r.event.first_iteration for _, r in d.events("iteration_stats") if isinstance(r.event, IterationStats)
    ]


async def test_a_launch_from_a_checkpoint_resumes_after_it(
    coordinator: TestCoordinator, sim_agent: Agent
) -> None:
    d = TaskDriver(coordinator)
    sources = [StateSource(rank=r, kind="checkpoint", path="/ckpt/task-t", iteration=849) for r in (0, 1)]
    await d.start(
        "sim-a", 1, launch(dp=2, model=MODEL, iterations=10**6).model_copy(update={"state_sources": sources})
    )
    await d.wait_iteration(851)
    assert min(_first_iterations(d)) == 850


async def test_a_launch_with_no_source_starts_at_zero(coordinator: TestCoordinator, sim_agent: Agent) -> None:
    d = TaskDriver(coordinator)
    await d.start("sim-a", 1, launch(dp=2, model=MODEL, iterations=10**6))
    await d.wait_iteration(2)
    assert min(_first_iterations(d)) == 0
