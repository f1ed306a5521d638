"""When every local rank of a task has finished its training, the task's snapshots (this node's and
peers' replicas) are deleted from the agent's snapshot root; another task's stay."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from agents.agent import Agent, AgentConfig
from agents.snapshots import SnapshotStore, SnapshotStoreConfig
from agents.testing import TestCoordinator
from tests.agents.helpers import launch, start_command
from tests.agents.snapshot_worker import write_snapshot_files


async def test_the_snapshots_of_a_finished_task_are_deleted_and_others_kept(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    store = SnapshotStore("sim-a", SnapshotStoreConfig(root=tmp_path / "shm"))
    await store.start()
    cfg = AgentConfig(
        coordinator=coordinator.url,
        token="secret",
        devices=2,
        worker_kind="sim",
        node="sim-a",
        run_dir=tmp_path,
    )
    cfg.worker_env.update(store.worker_env())
    agent = Agent(cfg, snapshots=store)
    run = asyncio.ensure_future(agent.run())
    try:
        await coordinator.wait_for(lambda: coordinator.messages("hello", "sim-a"), 10)
        own = write_snapshot_files(store.root, "sim-a", "done", 1, 3, [0, 1])
        replica = write_snapshot_files(store.root, "peer", "done", 1, 3, [2, 3])
        other = write_snapshot_files(store.root, "sim-a", "other", 1, 3, [0])
        ack = await coordinator.command("sim-a", start_command("done", 1, launch(dp=2, iterations=3), "s1"))
        assert ack.outcome == "done", ack
        await coordinator.wait_for(lambda: len(coordinator.reports("exited", "done")) == 2, 30)
        assert {r.event.exit_code for _, r in coordinator.reports("exited", "done")} == {0}  # type: ignore[union-attr]
        assert not own.exists()
        assert not replica.exists()
        assert other.exists()
    finally:
        await agent.client.stop()
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await run
        await store.close()
