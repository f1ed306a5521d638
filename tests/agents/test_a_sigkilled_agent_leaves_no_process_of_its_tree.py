"""An agent that is SIGKILLed leaves no process of its tree behind: its worker (``PR_SET_PDEATHSIG``), the
worker's ``dist_checkpointing`` multiprocessing helpers (``resource_tracker``, a ``Manager``'s
``spawn_main``: no ``PDEATHSIG`` of their own, they used to stay with ppid 1), its spare zygote and its
warm spare are all gone within seconds (the agent's guard, :mod:`agents.guard`), and so is its snapshot
root under ``/dev/shm`` when it held no snapshot."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from pathlib import Path

import psutil
import pytest

from agents.settings import ENV_SPARES
from agents.snapshots import default_root
from agents.testing import TestCoordinator, spawn_agent, wait_spare
from tests.agents.helpers import launch, start_command

pytestmark = pytest.mark.slow

NODE = "guard-a"
MARKER = "UNICRON_TEST_AGENT_TREE"
"""Set in the agent's environment: every process of its tree inherits it."""


def _tree(tag: str) -> dict[int, str]:
    """Live (non-zombie) processes whose environment carries ``MARKER=tag``, with their command lines."""
    needle = f"{MARKER}={tag}".encode()
    found: dict[int, str] = {}
    for p in psutil.process_iter():
        try:
            with open(f"/proc/{p.pid}/environ", "rb") as fh:
                if needle not in fh.read().split(b"\0"):
                    continue
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            found[p.pid] = " ".join(p.cmdline())
        except (OSError, psutil.Error):
            continue
    return found


async def test_sigkill_of_the_agent_takes_its_workers_helpers_zygote_and_spares(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex
    run_dir = tmp_path / "agent"
    ckpt = tmp_path / "ckpt"
    agent = await spawn_agent(coordinator.url, NODE, 1, run_dir, extra_env={ENV_SPARES: "1", MARKER: tag})
    try:
        await coordinator.wait_for(lambda: coordinator.messages("hello", NODE), 30)
        assert default_root(NODE, instance=str(run_dir.resolve())).is_dir()
        wl = launch(dp=1, iterations=100_000).model_copy(
            update={"checkpoint_dir": str(ckpt), "checkpoint_interval": 2}
        )
        ack = await coordinator.command(NODE, start_command("guard", 1, wl, "start-1"))
        assert ack.outcome == "done", ack
        await coordinator.wait_for(lambda: (ckpt / "latest").exists(), 180)
        await wait_spare(run_dir, timeout=180)
        deadline = time.monotonic() + 30
        while "resource_tracker" not in " ".join(_tree(tag).values()) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        before = _tree(tag)
        names = " ".join(before.values())
        for part in ("agents.training.worker", "resource_tracker", "spawn_main", "agents.training.zygote"):
            assert part in names, (part, before)
        assert agent.pid in before

        os.kill(agent.pid, signal.SIGKILL)
        await agent.wait()
        deadline = time.monotonic() + 10
        while _tree(tag) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert _tree(tag) == {}
        root = default_root(NODE, instance=str(run_dir.resolve()))
        while root.exists() and time.monotonic() < deadline + 5:
            await asyncio.sleep(0.2)
        assert not root.exists(), sorted(str(p) for p in root.rglob("*"))
    finally:
        if agent.returncode is None:
            agent.kill()
            await agent.wait()
        for pid in _tree(tag):  # never leave them running, whatever the outcome
            os.kill(pid, signal.SIGKILL)
