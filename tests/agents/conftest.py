from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agents.agent import Agent, AgentConfig
from agents.testing import TestCoordinator


@pytest.fixture
async def coordinator() -> AsyncIterator[TestCoordinator]:
    async with TestCoordinator(heartbeat_timeout_s=2.5) as c:
        yield c


@pytest.fixture
async def sim_agent(coordinator: TestCoordinator, tmp_path: Path) -> AsyncIterator[Agent]:
    """An in-process agent with simulated workers, connected to the test coordinator."""
    agent = Agent(
        AgentConfig(
            coordinator=coordinator.url,
            token="secret",
            devices=4,
            worker_kind="sim",
            node="sim-a",
            run_dir=tmp_path,
        )
    )
    task = asyncio.ensure_future(agent.run())
    await coordinator.wait_for(lambda: coordinator.messages("hello", "sim-a"), 10)
    yield agent
    await agent.client.stop()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
