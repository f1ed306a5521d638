"""A task that is over without finishing (cancelled, failed: ``stop_workers`` with ``task_ended``) has its
snapshots deleted from the agent's snapshot root along with its workers (this node's and peers' replicas);
a task whose workers are stopped because it moves elsewhere or is suspended keeps them (a transition may
still take its state from them), and so does every other task."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from agents.agent import Agent, AgentConfig
from agents.snapshots import SnapshotStore, SnapshotStoreConfig
from agents.testing import TestCoordinator
from controlplane.core.protocol import StopWorkersCommand
from tests.agents.helpers import launch, start_command
from tests.agents.snapshot_worker import write_snapshot_files

NODE = "sim-c"


async def test_stop_of_an_ended_task_drops_its_snapshots_and_a_plain_stop_keeps_them(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    store = SnapshotStore(NODE, SnapshotStoreConfig(root=tmp_path / "shm"))
    await store.start()
    cfg = AgentConfig(
        coordinator=coordinator.url, token="secret", devices=2, worker_kind="sim", node=NODE, run_dir=tmp_path
    )
    cfg.worker_env.update(store.worker_env())
    agent = Agent(cfg, snapshots=store)
    run = asyncio.ensure_future(agent.run())
    try:
        await coordinator.wait_for(lambda: coordinator.messages("hello", NODE), 10)
        own = write_snapshot_files(store.root, NODE, "gone", 1, 3, [0])
        replica = write_snapshot_files(store.root, "peer", "gone", 1, 3, [2])
        moved = write_snapshot_files(store.root, NODE, "moved", 1, 3, [1])
        for task, device in (("gone", 0), ("moved", 1)):
            wl = launch(dp=1, iterations=100_000)
            wl = wl.model_copy(update={"ranks": [wl.ranks[0].model_copy(update={"device": device})]})
            ack = await coordinator.command(NODE, start_command(task, 1, wl, f"start-{task}"))
            assert ack.outcome == "done", ack

        stop = StopWorkersCommand(command_id="stop-moved", task_id="moved", epoch=1, grace_s=0.0)
        ack = await coordinator.command(NODE, stop)
        assert ack.outcome == "done", ack
        assert moved.exists()  # a transition elsewhere may still fetch it

        cancel = StopWorkersCommand(
            command_id="stop-gone", task_id="gone", epoch=1, grace_s=0.0, task_ended=True
        )
        ack = await coordinator.command(NODE, cancel)
        assert ack.outcome == "done", ack
        assert not own.exists()
        assert not replica.exists()
        assert moved.exists()
        assert [s.task_id for s in store.infos()] == ["moved"]
    finally:
        await agent.client.stop()
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await run
        await store.close()
