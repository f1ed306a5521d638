"""Warm spares are not workers: an idle spare appears in no Hello/Heartbeat worker list (before a task
and while one runs beside it), and no spare outlives its agent — neither an agent that stops (the
supervisor kills them) nor one that is SIGKILLed (PDEATHSIG)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import psutil
import pytest
import torch  # noqa: F401 - imported before any link is up: a first import blocks the loop for seconds

from agents.agent import Agent, AgentConfig
from agents.settings import ENV_SPARES
from agents.testing import TaskDriver, TestCoordinator, spawn_agent, wait_spare
from controlplane.core.protocol import Heartbeat
from tests.agents.helpers import launch

pytestmark = pytest.mark.slow


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def _wait_gone(pids: set[int], timeout: float = 10) -> set[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(_gone(p) for p in pids):
        await asyncio.sleep(0.05)
    return {p for p in pids if not _gone(p)}


async def _heartbeat_after(c: TestCoordinator, node: str, t: float) -> Heartbeat:
    got = await c.wait_for(lambda: [r for r in c.messages("heartbeat", node) if r.at > t], 30)
    hb = got[-1].envelope.message
    assert isinstance(hb, Heartbeat)
    return hb


async def test_an_idle_spare_is_no_worker_and_a_stopping_agent_kills_its_spares(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    agent = Agent(
        AgentConfig(
            coordinator=coordinator.url, token="secret", devices=1, node="n", run_dir=tmp_path, spares=2
        )
    )
    running = asyncio.ensure_future(agent.run())
    seen: set[int] = set()
    try:
        hello = (await coordinator.wait_for(lambda: coordinator.messages("hello", "n"), 30))[0]
        assert hello.envelope.message.workers == []
        first = await wait_spare(tmp_path)
        second = await wait_spare(tmp_path, exclude={first["pid"]})
        seen |= {first["pid"], second["pid"]}
        assert len(agent.supervisor.spares) == 2
        assert (await _heartbeat_after(coordinator, "n", time.time())).workers == []

        d = TaskDriver(coordinator)
        await d.start("n", 1, launch(dp=1, iterations=10**6))
        await d.wait_iteration(2)
        workers = (await _heartbeat_after(coordinator, "n", time.time())).workers
        (used,) = {w.pid for w in workers}
        assert used in seen  # the task's rank runs in one of the spares ...
        idle = (seen - {used}).pop()
        assert idle in {s["pid"] for s in agent.supervisor.spare_info()}  # ... the other is still one
        assert [(w.task_id, w.rank) for w in workers] == [(d.task_id, 0)]
        seen |= {s["pid"] for s in agent.supervisor.spare_info()}
        await d.stop("n", 1, grace_s=1.0)
        seen |= {s["pid"] for s in agent.supervisor.spare_info()}
    finally:
        await agent.client.stop()
        with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
            await asyncio.wait_for(running, 15)
        running.cancel()
    assert agent.supervisor.spares == {}
    assert await _wait_gone(seen) == set()


async def test_a_killed_agent_takes_its_spare_with_it(coordinator: TestCoordinator, tmp_path: Path) -> None:
    proc = await spawn_agent(coordinator.url, "k", 1, tmp_path, extra_env={ENV_SPARES: "1"})
    try:
        await coordinator.wait_for(lambda: coordinator.messages("hello", "k"), 60)
        spare = await wait_spare(tmp_path)
        assert not _gone(spare["pid"])
        assert (await _heartbeat_after(coordinator, "k", time.time())).workers == []
    finally:
        proc.kill()
        await proc.wait()
    assert await _wait_gone({spare["pid"]}) == set()
