"""A worker killed after ``dist_checkpointing`` started its multiprocessing helpers (``resource_tracker``,
``spawn_main``) leaves none of them behind: the agent kills the worker's whole process group."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from agents.settings import ENV_SPARES
from agents.testing import TestCoordinator, spawn_agent
from tests.agents.helpers import launch, start_command

pytestmark = pytest.mark.slow

NODE = "tree-a"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_a_worker_killed_after_a_checkpoint_leaves_no_helper_process(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    agent = await spawn_agent(coordinator.url, NODE, 1, tmp_path / "agent", extra_env={ENV_SPARES: "0"})
    try:
        await coordinator.wait_for(lambda: coordinator.messages("hello", NODE), 30)
        wl = launch(dp=1, iterations=100_000).model_copy(
            update={"checkpoint_dir": str(ckpt), "checkpoint_interval": 2}
        )
        ack = await coordinator.command(NODE, start_command("ckpt", 1, wl, "start-1"))
        assert ack.outcome == "done", ack
        await coordinator.wait_for(lambda: (ckpt / "latest").exists(), 120)
        started = coordinator.reports("started")[-1][1]
        worker = psutil.Process(started.event.pid)  # type: ignore[union-attr]
        helpers = [p.pid for p in worker.children(recursive=True)]
        names = " ".join(" ".join(psutil.Process(p).cmdline()) for p in helpers)
        assert "resource_tracker" in names, names  # what dist_checkpointing started

        os.kill(worker.pid, signal.SIGKILL)  # a crash: the worker cleans up nothing
        await coordinator.wait_for(lambda: coordinator.reports("exited"), 30)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in helpers) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert [p for p in helpers if _alive(p)] == []
    finally:
        if agent.returncode is None:
            agent.terminate()
            try:
                await asyncio.wait_for(agent.wait(), 20)
            except TimeoutError:
                agent.kill()
