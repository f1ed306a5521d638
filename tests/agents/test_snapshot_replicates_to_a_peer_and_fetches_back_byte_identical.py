"""A node's new complete snapshot is pushed to its replica peer over TCP; fetched back, every file is
byte-identical; a missing snapshot or an unreachable peer gives a clear error within the timeout."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from agents.snapshots import SnapshotStore, SnapshotStoreConfig, SnapshotTransferError
from tests.agents.helpers import free_port
from tests.agents.snapshot_worker import write_snapshot_files

TASK_KEY = "ab" * 32


def _files(d: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(d.iterdir())}


async def _until(cond: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def test_replica_is_pushed_to_the_peer_and_fetched_back_identically(tmp_path: Path) -> None:
    peer = SnapshotStore("node-b", SnapshotStoreConfig(root=tmp_path / "b", scan_interval_s=0.05))
    peer.set_secret("gpt", TASK_KEY)  # both agents run or keep the task
    await peer.start()
    assert peer.endpoint is not None
    own = SnapshotStore("node-a", SnapshotStoreConfig(root=tmp_path / "a", scan_interval_s=0.05))
    own.set_secret("gpt", TASK_KEY)  # both agents run or keep the task
    await own.start()
    try:
        src = write_snapshot_files(
            own.root, "node-a", "gpt", 1, 9, [0, 1], nbytes=3 << 20, replica=peer.endpoint
        )
        # the replica appears on the peer, listed as node-a's snapshot with both ranks
        await _until(lambda: peer.infos(), 10)
        [info] = peer.infos()
        assert (info.task_id, info.epoch, info.iteration, info.ranks, info.origin_node) == (
            "gpt",
            1,
            9,
            [0, 1],
            "node-a",
        )
        [replica_dir] = peer.paths("gpt", 9)
        assert _files(replica_dir) == _files(src)

        # node-a loses its shm (a node restart): it fetches the copy back from the peer
        original = _files(src)
        import shutil

        shutil.rmtree(own.root / "node-a")
        assert own.infos() == []
        fetched = await own.fetch(peer.endpoint, "gpt", 9)
        assert [_files(d) for d in fetched] == [original]
        assert [i.iteration for i in own.infos()] == [9]
    finally:
        await own.close()
        await peer.close()


async def test_fetching_a_snapshot_the_peer_does_not_hold_names_it(tmp_path: Path) -> None:
    peer = SnapshotStore("node-b", SnapshotStoreConfig(root=tmp_path / "b"))
    peer.set_secret("gpt", TASK_KEY)  # both agents run or keep the task
    await peer.start()
    own = SnapshotStore("node-a", SnapshotStoreConfig(root=tmp_path / "a"))
    own.set_secret("gpt", TASK_KEY)  # both agents run or keep the task
    try:
        assert peer.endpoint is not None
        with pytest.raises(SnapshotTransferError, match="no complete snapshot of task 'gpt' at iteration 4"):
            await own.fetch(peer.endpoint, "gpt", 4)
        assert not list((own.root).glob("*/gpt/*"))
    finally:
        await peer.close()


async def test_an_unreachable_peer_fails_within_the_timeout(tmp_path: Path) -> None:
    own = SnapshotStore("node-a", SnapshotStoreConfig(root=tmp_path / "a", timeout_s=2.0))
    t0 = time.monotonic()
    with pytest.raises((SnapshotTransferError, OSError)):
        await own.fetch(f"127.0.0.1:{free_port()}", "gpt", 4)
    assert time.monotonic() - t0 < 3.0
