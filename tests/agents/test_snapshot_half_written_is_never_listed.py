"""A snapshot without its COMPLETE marker (a rank still writing, or killed mid-way) is never listed,
served to a peer, replicated, or loaded."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agents.snapshots import SnapshotStore, SnapshotStoreConfig, SnapshotTransferError
from agents.training.snapshot import COMPLETE, SnapshotError, find_snapshot
from tests.agents.snapshot_worker import write_snapshot_files

TASK_KEY = "ab" * 32


async def test_a_half_written_snapshot_is_not_listed_served_or_replicated(tmp_path: Path) -> None:
    peer = SnapshotStore("node-b", SnapshotStoreConfig(root=tmp_path / "b", scan_interval_s=0.05))
    peer.set_secret("gpt", TASK_KEY)  # both agents run or keep the task
    await peer.start()
    own = SnapshotStore("node-a", SnapshotStoreConfig(root=tmp_path / "a", scan_interval_s=0.05))
    own.set_secret("gpt", TASK_KEY)  # both agents run or keep the task
    await own.start()
    try:
        assert peer.endpoint is not None
        assert own.endpoint is not None
        d = write_snapshot_files(
            own.root, "node-a", "gpt", 1, 9, [0, 1], complete=False, replica=peer.endpoint
        )
        await asyncio.sleep(0.3)  # several scans
        assert own.infos() == []
        assert peer.infos() == []
        with pytest.raises(SnapshotError):
            find_snapshot(own.root, "gpt", 9)
        with pytest.raises(SnapshotTransferError, match="no complete snapshot"):
            await peer.fetch(own.endpoint, "gpt", 9)
        assert d.is_dir()  # newer than any complete one: still being written, kept

        (d / COMPLETE).write_text("{}")  # the last rank finished
        await asyncio.sleep(0.3)
        assert [(i.iteration, i.ranks) for i in own.infos()] == [(9, [0, 1])]
        assert [(i.iteration, i.origin_node) for i in peer.infos()] == [(9, "node-a")]
    finally:
        await own.close()
        await peer.close()


async def test_a_stale_incomplete_snapshot_is_deleted(tmp_path: Path) -> None:
    store = SnapshotStore("node-a", SnapshotStoreConfig(root=tmp_path, stale_incomplete_s=60.0))
    d = write_snapshot_files(tmp_path, "node-a", "gpt", 1, 9, [0], complete=False)
    import time

    assert store.gc(now=time.time()) == []
    assert store.gc(now=time.time() + 61.0) == [d]
    assert not d.exists()
