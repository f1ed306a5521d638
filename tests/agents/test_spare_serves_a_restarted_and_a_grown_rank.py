"""Warm spares (agents.training.spare) with real Megatron workers: a rank restarted by a Reconfigure
and a rank added by a grow run in the spare process the agent had pre-started (the new rank's pid
is the spare's), the rank reports its TransitionReport under the task/epoch/rank it was assigned,
its state right after the migration equals the source replica's (as in
test_migration_sources_give_the_source_state), it writes its own log and stack files, and the
agent starts a new spare to replace the one it used.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch  # noqa: F401 - imported before any link is up: a first import blocks the loop for seconds

from agents.settings import ENV_SPARES
from agents.testing import (
    TaskDriver,
    TestCoordinator,
    load_state,
    same_state,
    spawn_agent,
    stop_agent,
    wait_spare,
)
from agents.training.bench_knobs import ENV_STATE_DUMP, ENV_STATE_DUMP_FIRST
from controlplane.core.protocol import (
    FaultSpec,
    ParallelConfig,
    StateSource,
    TransitionReport,
    WorkerReport,
    WorkerStarted,
)
from tests.agents.helpers import launch

pytestmark = pytest.mark.slow

NODE = "warm"
LONG = 10**6


def _report(r: WorkerReport) -> TransitionReport:
    assert isinstance(r.event, TransitionReport)
    return r.event


def _started_pid(d: TaskDriver, epoch: int, rank: int) -> int:
    pids = [
        r.event.pid
        for _, r in d.events("started", epoch)
        if r.rank == rank and isinstance(r.event, WorkerStarted)
    ]
    assert len(pids) == 1, pids
    return pids[0]


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(kv.decode().split("=", 1) for kv in raw if b"=" in kv)


async def _agent(c: TestCoordinator, run_dir: Path, dump: Path) -> asyncio.subprocess.Process:
    env = {ENV_STATE_DUMP: str(dump), ENV_STATE_DUMP_FIRST: "2", ENV_SPARES: "1"}
    proc = await spawn_agent(c.url, NODE, 2, run_dir, hang_floor=5.0, extra_env=env)
    await c.wait_for(lambda: c.messages("hello", NODE), 60)
    return proc


async def test_a_restarted_rank_runs_in_the_warm_spare(coordinator: TestCoordinator, tmp_path: Path) -> None:
    dump, run_dir = tmp_path / "dump", tmp_path / "agent"
    dump.mkdir()
    agent = await _agent(coordinator, run_dir, dump)
    d = TaskDriver(coordinator)
    try:
        first_spare = await wait_spare(run_dir)
        await d.start(NODE, 1, launch(dp=2, iterations=LONG))
        assert _started_pid(d, 1, 0) == first_spare["pid"]  # StartWorkers uses the spare too
        await d.wait_iteration(3, epoch=1)
        spare = await wait_spare(run_dir, exclude={first_spare["pid"]})  # its replacement
        assert spare["rss_kb"] > 0
        await d.inject(NODE, 1, FaultSpec(kind="crash", rank=1))  # SIGKILL now
        await d.wait_events("exception", 1)
        new = launch(dp=2, iterations=LONG).model_copy(
            update={"state_sources": [StateSource(rank=1, kind="same_node", source_node=NODE, source_rank=0)]}
        )
        ack = await d.reconfigure(
            NODE, 2, new, previous_epoch=1, previous_parallel=ParallelConfig(dp=2), survivors={0: 0}
        )
        assert "in place [0], fresh [1]" in ack.detail
        reps = {r.rank: (r, _report(r)) for r in await d.wait_events("transition", 2, epoch=2)}
        pid = _started_pid(d, 2, 1)
        assert pid == spare["pid"]  # the restarted rank is the pre-started process
        assert _environ(pid)["OMP_NUM_THREADS"] == "1"
        replacement = await wait_spare(run_dir, exclude={first_spare["pid"], spare["pid"]})
        await d.stop(NODE, 2, grace_s=1.0)
    finally:
        await stop_agent(agent)
        await agent.wait()
    envelope, fresh = reps[1]
    assert (envelope.task_id, envelope.epoch, envelope.rank) == (d.task_id, 2, 1)
    assert (fresh.in_place, fresh.source) == (False, "same_node")
    assert (fresh.source_node, fresh.source_rank) == (NODE, 0)
    assert fresh.bytes_moved > 0
    assert replacement["pid"] not in (pid, first_spare["pid"])
    assert same_state(load_state(dump, "migrated", 1, epoch=2), load_state(dump, "migrated", 0, epoch=2))
    log = (run_dir / f"worker-{d.task_id}-e2-r1.log").read_text()
    assert "[transition] epoch 2 rank 1" in log  # the spare writes to the rank's log file
    assert (run_dir / f"stack-{d.task_id}-e2-r1.txt").exists()  # and registered its stack file


async def test_a_grown_rank_runs_in_the_warm_spare(coordinator: TestCoordinator, tmp_path: Path) -> None:
    dump, run_dir = tmp_path / "dump", tmp_path / "agent"
    dump.mkdir()
    agent = await _agent(coordinator, run_dir, dump)
    d = TaskDriver(coordinator)
    try:
        first_spare = await wait_spare(run_dir)
        await d.start(NODE, 1, launch(dp=1, iterations=LONG))
        await d.wait_iteration(2, epoch=1)
        spare = await wait_spare(run_dir, exclude={first_spare["pid"]})
        grown = launch(dp=2, iterations=LONG).model_copy(
            update={"state_sources": [StateSource(rank=1, kind="same_node", source_node=NODE, source_rank=0)]}
        )
        await d.reconfigure(
            NODE, 2, grown, previous_epoch=1, previous_parallel=ParallelConfig(dp=1), survivors={0: 0}
        )
        reps = {r.rank: (r, _report(r)) for r in await d.wait_events("transition", 2, epoch=2)}
        pid = _started_pid(d, 2, 1)
        replacement = await wait_spare(run_dir, exclude={first_spare["pid"], spare["pid"]})
        await d.stop(NODE, 2, grace_s=1.0)
    finally:
        await stop_agent(agent)
        await agent.wait()
    assert pid == spare["pid"]
    envelope, new = reps[1]
    assert (envelope.task_id, envelope.epoch, envelope.rank) == (d.task_id, 2, 1)
    assert (new.in_place, new.source, new.rolled_back_iterations) == (False, "same_node", 0)
    assert new.bytes_moved > 0
    assert replacement["pid"] != pid
    assert same_state(load_state(dump, "migrated", 1, epoch=2), load_state(dump, "migrated", 0, epoch=2))
