"""Nearest-principle state migration (docs/ARCHITECTURE.md §7.6) with real Megatron workers: for every source
kind a
worker actually uses, its TransitionReport names it and the state the rank holds right after the
migration equals the source's (parameters and Adam moments, bitwise).

- ``local_device``: a survivor keeps its own state in place;
- ``same_node``: a replacement rank on the node of a live replica receives its state by broadcast;
- ``peer_replica``: a new rank on another node (another agent) receives a live replica's state;
- ``checkpoint``: the whole task rolls back to the dist_checkpointing checkpoint;
- ``memory_snapshot``: the whole task rolls back to the in-memory snapshot (agents.training.snapshot).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
import torch  # noqa: F401 - imported before any link is up: a first import blocks the loop for seconds

from agents.agent import Agent, AgentConfig
from agents.monitor import MonitorConfig
from agents.testing import TaskDriver, TestCoordinator, load_state, same_state, spawn_agent, stop_agent
from agents.training.bench_knobs import ENV_STATE_DUMP, ENV_STATE_DUMP_FIRST
from agents.training.snapshot import ENV_SNAPSHOT_DIR, ENV_SNAPSHOT_NODE
from controlplane.core.protocol import (
    FaultSpec,
    ParallelConfig,
    RankAssignment,
    StateSource,
    TransitionReport,
    WorkerReport,
)
from tests.agents.helpers import launch

pytestmark = pytest.mark.slow

ITERATIONS = 8


def _report(r: WorkerReport) -> TransitionReport:
    assert isinstance(r.event, TransitionReport)
    return r.event


async def _agent(
    c: TestCoordinator, tmp: Path, node: str, devices: int, env: dict[str, str]
) -> asyncio.subprocess.Process:
    proc = await spawn_agent(c.url, node, devices, tmp / node, hang_floor=2.0, extra_env=env)
    await c.wait_for(lambda: c.messages("hello", node), 30)
    return proc


async def test_a_replacement_on_the_same_node_takes_the_live_replica_state(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    dump = tmp_path / "dump"
    dump.mkdir()
    agent = await _agent(coordinator, tmp_path, "s", 2, {ENV_STATE_DUMP: str(dump)})
    d = TaskDriver(coordinator)
    try:
        await d.start("s", 1, launch(dp=2, iterations=ITERATIONS))
        await d.inject("s", 1, FaultSpec(kind="crash", rank=1, at_iteration=3))
        await d.wait_events("exception", 1)
        new = launch(dp=2, iterations=ITERATIONS).model_copy(
            update={"state_sources": [StateSource(rank=1, kind="same_node", source_node="s", source_rank=0)]}
        )
        ack = await d.reconfigure(
            "s", 2, new, previous_epoch=1, previous_parallel=ParallelConfig(dp=2), survivors={0: 0}
        )
        assert "in place [0], fresh [1]" in ack.detail
        reps = {r.rank: _report(r) for r in await d.wait_events("transition", 2, epoch=2)}
        await d.wait_events("exited", 2, epoch=2)
    finally:
        await stop_agent(agent)
        await agent.wait()
    kept, fresh = reps[0], reps[1]
    assert (kept.in_place, kept.source, kept.from_epoch, kept.reused_micro_batches) == (
        True,
        "local_device",
        1,
        2,
    )
    assert (fresh.in_place, fresh.source, fresh.from_epoch) == (False, "same_node", None)
    assert (fresh.source_node, fresh.source_rank) == ("s", 0)
    assert fresh.bytes_moved > 0
    assert fresh.recomputed_micro_batches == 2  # the dead replica's share of iteration 3, nothing more
    assert fresh.iteration == kept.iteration == 3
    assert same_state(load_state(dump, "migrated", 1, epoch=2), load_state(dump, "migrated", 0, epoch=2))
    # the survivor's state is the one it had after iteration 2 (kept in place, not reloaded)
    assert same_state(load_state(dump, "migrated", 0, epoch=2), load_state(dump, 2, 0))


async def test_a_new_rank_on_another_node_takes_a_peer_replica_state(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    dump = tmp_path / "dump"
    dump.mkdir()
    env = {ENV_STATE_DUMP: str(dump), ENV_STATE_DUMP_FIRST: "2"}
    a = await _agent(coordinator, tmp_path, "a", 1, env)
    b = await _agent(coordinator, tmp_path, "b", 1, env)
    d = TaskDriver(coordinator)
    long = 10**6
    try:
        await d.start("a", 1, launch(dp=1, iterations=long))
        await d.wait_iteration(2)
        grown = launch(dp=2, iterations=long)
        on_a = grown.model_copy(update={"ranks": [RankAssignment(rank=0, device=0)]})
        on_b = grown.model_copy(
            update={
                "ranks": [RankAssignment(rank=1, device=0)],
                "state_sources": [StateSource(rank=1, kind="peer_replica", source_node="a", source_rank=0)],
            }
        )
        common = {"previous_epoch": 1, "previous_parallel": ParallelConfig(dp=1), "survivors": {0: 0}}
        await asyncio.gather(d.reconfigure("a", 2, on_a, **common), d.reconfigure("b", 2, on_b, **common))  # type: ignore[arg-type]
        reps = {r.rank: _report(r) for r in await d.wait_events("transition", 2, epoch=2)}
        await d.wait_iteration(reps[0].iteration + 2, epoch=2)
        await asyncio.gather(d.stop("a", 2), d.stop("b", 2))
    finally:
        for p in (a, b):
            p.kill()
            await p.wait()
    assert (reps[0].in_place, reps[0].source) == (True, "local_device")
    new = reps[1]
    assert (new.in_place, new.source, new.source_node, new.source_rank) == (False, "peer_replica", "a", 0)
    assert new.bytes_moved > 0
    assert new.rolled_back_iterations == 0
    # a grow at an iteration boundary: nothing to reuse, nothing lost
    assert (new.reused_micro_batches, new.recomputed_micro_batches) == (0, 0)
    assert same_state(load_state(dump, "migrated", 1, epoch=2), load_state(dump, "migrated", 0, epoch=2))
    # and both replicas stay identical afterwards (same reduced gradients, same Adam state)
    first = reps[0].iteration
    assert same_state(load_state(dump, first + 1, 1, epoch=2), load_state(dump, first + 1, 0, epoch=2))


async def test_stored_sources_roll_the_task_back_to_their_iteration(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    dump, ckpt, shm = tmp_path / "dump", tmp_path / "ckpt", tmp_path / "shm"
    for p in (dump, ckpt, shm, tmp_path / "st"):
        p.mkdir()
    env = {
        ENV_STATE_DUMP: str(dump),
        ENV_STATE_DUMP_FIRST: "8",
        ENV_SNAPSHOT_DIR: str(shm),
        ENV_SNAPSHOT_NODE: "st",
    }
    # In-process agent: the workers write their snapshots straight into ``shm`` (no store beside it).
    agent = Agent(
        AgentConfig(
            coordinator=coordinator.url,
            token="secret",
            devices=2,
            node="st",
            run_dir=tmp_path / "st",
            worker_env=env,
            monitor=MonitorConfig(hang_floor_s=3.0),
        )
    )
    running = asyncio.ensure_future(agent.run())
    await coordinator.wait_for(lambda: coordinator.messages("hello", "st"), 30)
    d = TaskDriver(coordinator)
    try:
        first = launch(dp=2, iterations=20).model_copy(
            update={"checkpoint_dir": str(ckpt), "checkpoint_interval": 4, "snapshot_interval": 2}
        )
        await d.start("st", 1, first)
        await d.inject("st", 1, FaultSpec(kind="crash", rank=1, at_iteration=7))
        await d.wait_events("exception", 1)
        assert (ckpt / "latest").read_text() == "3"
        # checkpoint (saved after iteration 3): the survivor reloads it and redoes 4..6
        to_ckpt = launch(dp=1, iterations=10**6).model_copy(
            update={
                "checkpoint_dir": str(ckpt),
                "state_sources": [
                    StateSource(rank=0, kind="checkpoint", path=str(ckpt / "iter_0000003"), iteration=3)
                ],
            }
        )
        survivors = {"previous_parallel": ParallelConfig(dp=2), "survivors": {0: 0}}
        await d.reconfigure("st", 2, to_ckpt, previous_epoch=1, **survivors)  # type: ignore[arg-type]
        (rep,) = [_report(r) for r in await d.wait_events("transition", 1, epoch=2)]
        assert (rep.source, rep.in_place, rep.iteration, rep.rolled_back_iterations) == (
            "checkpoint",
            True,
            4,
            3,
        )
        assert rep.bytes_moved > 0
        assert same_state(load_state(dump, "migrated", 0, epoch=2), load_state(dump, 3, 0, epoch=1))

        # memory snapshot (taken after iteration 5 in epoch 1): a retry-like move to epoch 3
        to_snap = launch(dp=1, iterations=10**6).model_copy(
            update={
                "state_sources": [StateSource(rank=0, kind="memory_snapshot", source_node="st", iteration=5)]
            }
        )
        await d.reconfigure(
            "st", 3, to_snap, previous_epoch=2, previous_parallel=ParallelConfig(dp=1), survivors={0: 0}
        )
        (rep,) = [_report(r) for r in await d.wait_events("transition", 1, epoch=3)]
        assert (rep.source, rep.in_place, rep.iteration) == ("memory_snapshot", True, 6)
        assert rep.bytes_moved > 0
        assert same_state(load_state(dump, "migrated", 0, epoch=3), load_state(dump, 5, 0, epoch=1))
    finally:
        await agent.supervisor.close()
        await agent.client.stop()
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await running


async def test_a_checkpoint_saves_after_a_replica_took_its_peer_state(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    """The first dist_checkpointing save after a broadcast migration succeeds: the received optimizer
    state is type-identical to the sender's (a tuple ``betas`` turned into a list made the ranks'
    common state differ and ``validate_sharding_integrity`` raised AssertionError; bench/recovery)."""
    ckpt = tmp_path / "ckpt"
    agent = await _agent(coordinator, tmp_path, "s", 2, {})
    d = TaskDriver(coordinator)
    first = launch(dp=2, iterations=ITERATIONS).model_copy(
        update={"checkpoint_dir": str(ckpt), "checkpoint_interval": 100}
    )
    try:
        await d.start("s", 1, first)
        await d.inject("s", 1, FaultSpec(kind="crash", rank=1, at_iteration=3))
        await d.wait_events("exception", 1)
        new = launch(dp=2, iterations=ITERATIONS).model_copy(  # a new epoch: a new rendezvous port
            update={
                "checkpoint_dir": str(ckpt),
                "checkpoint_interval": 2,
                "state_sources": [StateSource(rank=1, kind="same_node", source_node="s", source_rank=0)],
            }
        )
        await d.reconfigure(
            "s", 2, new, previous_epoch=1, previous_parallel=ParallelConfig(dp=2), survivors={0: 0}
        )
        exited = await d.wait_events("exited", 2, epoch=2)
    finally:
        await stop_agent(agent)
        await agent.wait()
    assert d.events("exception", 2) == [], [r.event for _, r in d.events("exception", 2)]
    assert all(getattr(r.event, "exit_code", None) == 0 for r in exited), [r.event for r in exited]
    assert (ckpt / "latest").read_text().strip() == str(ITERATIONS - 1)  # saved at 3, 5 and 7
