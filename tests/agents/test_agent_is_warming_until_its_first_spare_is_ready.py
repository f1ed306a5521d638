"""An agent with warm spares says ``warming`` in its Hello and heartbeats until its first spare is
ready, then a heartbeat says it is warm, and it stays warm (a spare handed out later changes nothing).
Warming also ends when spare starts give up or after the bound; an agent without spares (or with
simulated workers) is never warming."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from agents.settings import ENV_SPARES
from agents.spare_pool import SPARE_START_FAILURES
from agents.supervisor import Supervisor
from agents.testing import TaskDriver, TestCoordinator, spares, spawn_agent
from agents.training.hook import ENV_SOCKET
from controlplane.core.protocol import Hello
from tests.agents.helpers import launch


@pytest.mark.slow
async def test_a_real_agent_is_warming_until_its_spare_is_ready(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    t0 = time.time()
    proc = await spawn_agent(coordinator.url, "w", 1, tmp_path, extra_env={ENV_SPARES: "1"})
    try:
        (hello,) = await coordinator.wait_for(lambda: coordinator.messages("hello", "w"), 60)
        assert isinstance(hello.envelope.message, Hello)
        assert hello.envelope.message.warming is True
        assert not [s for s in spares(tmp_path) if s["ready"]]  # its spare is still importing

        warm = await coordinator.wait_warm("w", since=t0, timeout=90)
        before = [hb for at, hb in coordinator.heartbeats("w") if at < warm]
        assert all(hb.warming for hb in before)
        ready = [s for s in spares(tmp_path) if s["ready"]]
        assert len(ready) == 1  # warm means: a rank placed here now gets a spare
        written = json.loads((tmp_path / "spares.json").read_text())["at"]
        print(f"spare ready (spares.json) -> warm heartbeat arrived: {warm - written:.3f} s")
        assert warm - written < 1.5  # the spare's readiness ends warming (not the 30 s bound)

        # the spare is handed out (the agent has none ready until it refills): still warm
        d = TaskDriver(coordinator)
        await d.start("w", 1, launch(dp=1, iterations=10**6))
        await d.wait_iteration(1, timeout=60)
        (started,) = [r.event for _, r in d.events("started")]
        assert started.pid == ready[0]["pid"]  # type: ignore[union-attr]
        t_used = time.time()
        await coordinator.wait_for(lambda: coordinator.heartbeats("w", since=t_used + 1.5), 10)
        assert not any(hb.warming for _, hb in coordinator.heartbeats("w", since=warm))
        await d.stop("w", 1, grace_s=1.0)
    finally:
        proc.kill()
        await proc.wait()


async def _started(sup: Supervisor) -> Supervisor:
    await sup.start()
    return sup


async def test_warming_ends_when_spare_starts_give_up(tmp_path: Path) -> None:
    # every spare exits at once: its hook socket variable is empty
    sup = Supervisor(emit=lambda r: None, run_dir=tmp_path, spares=1, worker_env={ENV_SOCKET: ""})
    ended: list[float] = []
    sup.on_warm = lambda: ended.append(time.monotonic())
    await _started(sup)
    try:
        assert sup.warming is True
        deadline = time.monotonic() + 30
        while sup.warming and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert sup.warming is False
        assert sup.spare_pool.failures >= SPARE_START_FAILURES
        assert len(ended) == 1
    finally:
        await sup.close()


async def test_warming_ends_after_its_bound_and_stays_over(tmp_path: Path) -> None:
    sup = Supervisor(emit=lambda r: None, run_dir=tmp_path, spares=1)
    sup.spare_pool.warming_max_s = 0.3  # far less than a spare's torch/megatron imports
    ended: list[float] = []
    sup.on_warm = lambda: ended.append(time.monotonic())
    await _started(sup)
    try:
        assert sup.warming is True
        await asyncio.sleep(0.6)
        assert not [s for s in sup.spare_info() if s["ready"]]
        assert sup.warming is False
        assert len(ended) == 1
    finally:
        await sup.close()


async def test_no_spares_or_simulated_workers_never_warm(tmp_path: Path) -> None:
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    for sup in (
        Supervisor(emit=lambda r: None, run_dir=tmp_path / "a", spares=0),
        Supervisor(emit=lambda r: None, run_dir=tmp_path / "b", spares=1, worker_kind="sim"),
    ):
        assert sup.warming is False
        await _started(sup)
        try:
            assert sup.warming is False
            assert sup.spares == {}
        finally:
            await sup.close()
