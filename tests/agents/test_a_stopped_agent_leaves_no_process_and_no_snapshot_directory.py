"""An agent stopped with SIGTERM leaves nothing behind: no process it started (workers, their
``dist_checkpointing`` helpers) and no snapshot directory under ``/dev/shm``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psutil
import pytest

from agents.settings import ENV_SPARES
from agents.snapshots import default_root
from agents.testing import TestCoordinator, spawn_agent
from tests.agents.helpers import launch, start_command
from tests.agents.snapshot_worker import write_snapshot_files

pytestmark = pytest.mark.slow

NODE = "stop-a"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_sigterm_stops_the_workers_their_helpers_and_removes_the_snapshot_root(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    run_dir = tmp_path / "agent"
    ckpt = tmp_path / "ckpt"
    agent = await spawn_agent(coordinator.url, NODE, 1, run_dir, extra_env={ENV_SPARES: "0"})
    try:
        await coordinator.wait_for(lambda: coordinator.messages("hello", NODE), 30)
        root = default_root(NODE, instance=str(run_dir.resolve()))
        assert root.is_dir()
        write_snapshot_files(root, NODE, "ckpt", 1, 3, [0])  # what a worker leaves in shm
        wl = launch(dp=1, iterations=100_000).model_copy(
            update={"checkpoint_dir": str(ckpt), "checkpoint_interval": 2}
        )
        ack = await coordinator.command(NODE, start_command("ckpt", 1, wl, "start-1"))
        assert ack.outcome == "done", ack
        await coordinator.wait_for(lambda: (ckpt / "latest").exists(), 120)
        tree = [p.pid for p in psutil.Process(agent.pid).children(recursive=True)]
        names = " ".join(" ".join(psutil.Process(p).cmdline()) for p in tree if _alive(p))
        assert "agents.training.worker" in names, names
        assert "resource_tracker" in names, names

        agent.terminate()
        assert await asyncio.wait_for(agent.wait(), 30) == 0
        await asyncio.sleep(0.5)
        assert [p for p in tree if _alive(p)] == []
        assert not root.exists(), sorted(str(p) for p in root.rglob("*"))
    finally:
        if agent.returncode is None:
            agent.kill()
            await agent.wait()
