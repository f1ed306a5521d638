"""An agent (in-process, simulated workers, a real snapshot store) told to take a rank's state from a
peer's in-memory snapshot fetches it with the key its reconfigure command carried: with the task's key
the copy lands in its store; with another key the peer refuses, nothing lands, and the command fails as
``SnapshotFetchFailed`` naming the peer (the coordinator then blames the copy, not this node)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agents.agent import Agent, AgentConfig
from agents.snapshots import SnapshotStore, SnapshotStoreConfig
from agents.testing import TestCoordinator
from controlplane.core.protocol import ReconfigureCommand, StateSource
from tests.agents.helpers import launch
from tests.agents.snapshot_worker import write_snapshot_files

TASK_KEY = "c3" * 32
OTHER_KEY = "d4" * 32


@pytest.fixture
async def peer(tmp_path: Path) -> AsyncIterator[SnapshotStore]:
    store = SnapshotStore("peer", SnapshotStoreConfig(root=tmp_path / "peer"))
    store.set_secret("t", TASK_KEY)
    write_snapshot_files(store.root, "peer", "t", 1, 5, [0], nbytes=1 << 16)
    await store.start()
    yield store
    await store.close()


@pytest.fixture
async def agent(coordinator: TestCoordinator, tmp_path: Path) -> AsyncIterator[Agent]:
    store = SnapshotStore("sim-a", SnapshotStoreConfig(root=tmp_path / "a"))
    await store.start()
    cfg = AgentConfig(
        coordinator=coordinator.url,
        token="secret",
        devices=1,
        worker_kind="sim",
        node="sim-a",
        run_dir=tmp_path,
    )
    cfg.worker_env.update(store.worker_env())
    a = Agent(cfg, snapshots=store)
    task = asyncio.ensure_future(a.run())
    await coordinator.wait_for(lambda: coordinator.messages("hello", "sim-a"), 10)
    yield a
    await a.client.stop()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    await store.close()


def _reconfigure(c: TestCoordinator, peer: SnapshotStore, key: str) -> ReconfigureCommand:
    source = StateSource(
        rank=0, kind="memory_snapshot", source_node="peer", endpoint=peer.endpoint, iteration=5
    )
    wl = launch(dp=1, iterations=10**6).model_copy(update={"state_sources": [source]})
    return ReconfigureCommand(command_id=c.new_id(), task_id="t", epoch=2, launch=wl, snapshot_secret=key)


async def test_another_key_fails_the_step_naming_the_peer(
    coordinator: TestCoordinator, agent: Agent, peer: SnapshotStore
) -> None:
    ack = await coordinator.command("sim-a", _reconfigure(coordinator, peer, OTHER_KEY))

    assert ack.outcome == "failed"
    assert f"SnapshotFetchFailed: snapshot fetch from {peer.endpoint} failed" in ack.detail
    assert "bad_mac" in ack.detail
    assert agent.snapshots is not None
    assert not list(agent.snapshots.root.glob("peer/t/*"))
    assert dict(peer.refusals) == {"bad_mac": 1}


async def test_the_tasks_key_fetches_the_copy(
    coordinator: TestCoordinator, agent: Agent, peer: SnapshotStore
) -> None:
    ack = await coordinator.command("sim-a", _reconfigure(coordinator, peer, TASK_KEY))

    assert ack.outcome == "done", ack.detail
    assert agent.snapshots is not None
    assert [(i.origin_node, i.iteration) for i in agent.snapshots.infos()] == [("peer", 5)]
    assert peer.refused == 0
