"""Node health monitoring (coordinator side of the heartbeat detector) against a real agent process."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from agents.testing import TestCoordinator, spawn_agent, stop_agent


@pytest.mark.slow
async def test_frozen_agent_is_lost_by_heartbeat_expiry_within_3s(tmp_path: Path) -> None:
    async with TestCoordinator(heartbeat_timeout_s=2.5) as c:
        agent = await spawn_agent(c.url, "frozen", 1, tmp_path / "a", worker="sim")
        try:
            await c.wait_for(lambda: len(c.messages("heartbeat", "frozen")) >= 2, 20)
            t0 = time.time()
            agent.send_signal(signal.SIGSTOP)  # socket stays open: only the heartbeats stop
            loss = (await c.wait_for(lambda: c.losses, 10))[0]
            assert loss.reason == "heartbeat_expired"
            assert loss.detected_at - t0 <= 3.0
            agent.send_signal(signal.SIGCONT)
            # the agent comes back on the same link: heartbeats resume
            n = len(c.messages("heartbeat", "frozen"))
            await c.wait_for(lambda: len(c.messages("heartbeat", "frozen")) > n, 5)
        finally:
            await stop_agent(agent)
            await agent.wait()


@pytest.mark.slow
async def test_killed_agent_is_lost_by_socket_state(tmp_path: Path) -> None:
    async with TestCoordinator() as c:
        agent = await spawn_agent(c.url, "killed", 1, tmp_path / "a", worker="sim")
        await c.wait_for(lambda: c.messages("hello", "killed"), 20)
        t0 = time.time()
        agent.kill()
        loss = (await c.wait_for(lambda: c.losses, 5))[0]
        assert loss.reason == "socket_closed"
        assert loss.detected_at - t0 < 1.0
        await asyncio.wait_for(agent.wait(), 5)
