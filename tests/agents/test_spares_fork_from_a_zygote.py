"""Warm spares forked from the agent's zygote (agents.training.zygote): one process imports torch and
Megatron-Core once and forks every spare; the spare is re-parented to the agent (a child subreaper),
which supervises it like a process it started itself:

- the spare's parent is the agent, its session its own, and it did not import anything itself (it was
  ready in far less time than the zygote's imports took); a used spare is replaced at once, by a fork;
- a rank running in a forked spare trains, and when it is SIGKILLed the agent reports the exit with the
  signal (the exit status of an adopted process is read, not guessed);
- with the zygote gone the agent starts spares as fresh processes again;
- the agent's death takes the zygote and its spares with it; a bad ``UNICRON_SPARE_ZYGOTE`` is refused
  by name, and ``UNICRON_SPARE_ZYGOTE=0`` gives spares that import everything themselves.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from agents.settings import ENV_SPARE_ZYGOTE, ENV_SPARES
from agents.testing import TaskDriver, TestCoordinator, spawn_agent, wait_spare
from controlplane.core.protocol import WorkerExited, WorkerStarted
from tests.agents.helpers import launch

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _zygote(run_dir: Path) -> dict[str, Any]:
    return dict(json.loads((run_dir / "spares.json").read_text()).get("zygote") or {})


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def _until(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.05)


async def test_forked_spares_are_the_agents_children_and_their_exits_are_read(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    agent = await spawn_agent(coordinator.url, "z", 1, tmp_path, extra_env={ENV_SPARES: "1"})
    d = TaskDriver(coordinator)
    try:
        await coordinator.wait_for(lambda: coordinator.messages("hello", "z"), 60)
        first = await wait_spare(tmp_path)
        zygote = _zygote(tmp_path)
        assert zygote["state"] == "ready"
        assert first["origin"] == "zygote"
        spare = psutil.Process(first["pid"])
        assert spare.ppid() == agent.pid  # adopted: re-parented from the zygote's fork to the agent
        assert psutil.Process(zygote["pid"]).ppid() == agent.pid
        assert os.getsid(first["pid"]) == first["pid"]  # its own session: the agent signals its group
        print(f"zygote imports {zygote['ready_s']:.2f} s; forked spare ready after {first['ready_s']:.3f} s")
        assert first["ready_s"] < zygote["ready_s"]  # it imported nothing itself

        await d.start("z", 1, launch(dp=1, iterations=10**6))
        (started,) = [r.event for _, r in d.events("started", 1) if isinstance(r.event, WorkerStarted)]
        assert started.pid == first["pid"]  # the rank runs in the forked spare
        await d.wait_iteration(2)
        second = await wait_spare(tmp_path, exclude={first["pid"]}, timeout=30)
        assert second["origin"] == "zygote"  # replaced at once by another fork

        os.kill(first["pid"], signal.SIGKILL)
        (exited,) = [r.event for r in await d.wait_events("exited", 1, epoch=1, timeout=30)]
        assert isinstance(exited, WorkerExited)
        assert exited.signal == signal.SIGKILL  # the adopted child's real exit status
        assert exited.signal_name == "SIGKILL"
        assert not exited.expected
        await _until(lambda: _gone(first["pid"]), 10, "the killed worker was not reaped")

        # the zygote dies: spares start as fresh processes again
        os.kill(zygote["pid"], signal.SIGKILL)
        await _until(lambda: _zygote(tmp_path).get("state") == "gone", 30, "zygote not given up")
        assert _zygote(tmp_path)["pid"] == zygote["pid"]
        await d.start("z", 2, launch(dp=1, iterations=10**6))  # takes the forked spare that was ready
        third = await wait_spare(tmp_path, exclude={first["pid"], second["pid"]}, timeout=120)
        assert third["origin"] == "exec"
        assert psutil.Process(third["pid"]).ppid() == agent.pid
    finally:
        agent.kill()
        await agent.wait()
    left = (second["pid"], third["pid"])
    await _until(lambda: all(_gone(p) for p in left), 10, "spares outlived the agent")


async def test_an_agents_death_takes_its_zygote_and_forked_spare_along(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    agent = await spawn_agent(coordinator.url, "y", 1, tmp_path, extra_env={ENV_SPARES: "1"})
    try:
        await coordinator.wait_for(lambda: coordinator.messages("hello", "y"), 60)
        spare = await wait_spare(tmp_path)
        zygote = _zygote(tmp_path)
        assert spare["origin"] == "zygote"
    finally:
        agent.kill()
        await agent.wait()
    left = (spare["pid"], zygote["pid"])
    await _until(lambda: all(_gone(p) for p in left), 10, "zygote or spare outlived the agent")


async def test_without_the_zygote_each_spare_imports_for_itself(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    env = {ENV_SPARES: "1", ENV_SPARE_ZYGOTE: "0"}
    agent = await spawn_agent(coordinator.url, "x", 1, tmp_path, extra_env=env)
    try:
        await coordinator.wait_for(lambda: coordinator.messages("hello", "x"), 60)
        spare = await wait_spare(tmp_path)
        assert spare["origin"] == "exec"
        assert _zygote(tmp_path) == {}
    finally:
        agent.kill()
        await agent.wait()


def test_a_bad_zygote_setting_is_refused_by_name(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), **{ENV_SPARE_ZYGOTE: "maybe"})
    argv = ["--coordinator", "ws://127.0.0.1:9/ws/agent/", "--token", "t", "--devices", "1"]
    out = subprocess.run(
        [sys.executable, "-m", "agents", *argv, "--run-dir", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "UNICRON_SPARE_ZYGOTE='maybe'" in out.stderr
    assert "Traceback" not in out.stderr
