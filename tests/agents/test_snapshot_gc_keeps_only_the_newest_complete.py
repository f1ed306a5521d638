"""GC keeps the newest complete snapshot per (task, origin node): older complete ones and incomplete
ones older than it go; a newer incomplete one (being written) stays; a dropped task loses all. The
complete snapshot just before the newest stays for ``superseded_grace_s`` after the newest completed
(a transition planned from the last heartbeat may still fetch it), and is still served meanwhile."""

from __future__ import annotations

import time
from pathlib import Path

from agents.snapshots import SnapshotStore, SnapshotStoreConfig
from tests.agents.snapshot_worker import write_snapshot_files


def test_gc_keeps_the_newest_complete_snapshot_per_task_and_origin(tmp_path: Path) -> None:
    store = SnapshotStore("node-a", SnapshotStoreConfig(root=tmp_path))
    old = write_snapshot_files(tmp_path, "node-a", "gpt", 1, 4, [0, 1])
    old_partial = write_snapshot_files(tmp_path, "node-a", "gpt", 1, 7, [0], complete=False)
    newest = write_snapshot_files(tmp_path, "node-a", "gpt", 1, 9, [0, 1])
    writing = write_snapshot_files(tmp_path, "node-a", "gpt", 1, 14, [0], complete=False)
    peer_old = write_snapshot_files(tmp_path, "node-b", "gpt", 1, 4, [2, 3])
    peer_new = write_snapshot_files(tmp_path, "node-b", "gpt", 1, 9, [2, 3])
    other_task = write_snapshot_files(tmp_path, "node-a", "bert", 3, 2, [0])

    gone = store.gc(now=time.time() + store.cfg.superseded_grace_s + 1)

    assert sorted(gone) == sorted([old, old_partial, peer_old])
    for d in (newest, writing, peer_new, other_task):
        assert d.is_dir()
    listed = sorted((i.task_id, i.origin_node, i.epoch, i.iteration) for i in store.infos())
    assert listed == [("bert", "node-a", 3, 2), ("gpt", "node-a", 1, 9), ("gpt", "node-b", 1, 9)]


def test_the_superseded_snapshot_stays_fetchable_for_the_grace_period(tmp_path: Path) -> None:
    store = SnapshotStore("node-a", SnapshotStoreConfig(root=tmp_path, superseded_grace_s=30.0))
    oldest = write_snapshot_files(tmp_path, "node-a", "gpt", 1, 4, [0, 1])
    previous = write_snapshot_files(tmp_path, "node-a", "gpt", 1, 9, [0, 1])
    newest = write_snapshot_files(tmp_path, "node-a", "gpt", 1, 14, [0, 1])

    assert store.gc() == [oldest]  # only the one just before the newest is kept, and only for a while
    assert previous.is_dir()
    assert store.paths("gpt", 9) == [previous]  # what a peer's fetch of iteration 9 is served from
    assert [i.iteration for i in store.infos()] == [14]  # heartbeats list the newest only

    assert store.gc(now=time.time() + 31.0) == [previous]
    assert newest.is_dir()


def test_a_newer_epoch_wins_over_a_higher_iteration_of_an_older_one(tmp_path: Path) -> None:
    """After a rollback the task runs a new epoch from an older iteration: that is the timeline."""
    store = SnapshotStore("node-a", SnapshotStoreConfig(root=tmp_path))
    abandoned = write_snapshot_files(tmp_path, "node-a", "gpt", 1, 20, [0])
    current = write_snapshot_files(tmp_path, "node-a", "gpt", 2, 15, [0])
    assert store.gc(now=time.time() + store.cfg.superseded_grace_s + 1) == [abandoned]
    assert current.is_dir()


def test_a_dropped_task_loses_every_snapshot_and_refuses_new_ones(tmp_path: Path) -> None:
    store = SnapshotStore("node-a", SnapshotStoreConfig(root=tmp_path))
    write_snapshot_files(tmp_path, "node-a", "gpt", 1, 9, [0, 1])
    write_snapshot_files(tmp_path, "node-b", "gpt", 1, 9, [2, 3])
    kept = write_snapshot_files(tmp_path, "node-a", "bert", 1, 9, [0])
    store.drop_task("gpt")
    assert not (tmp_path / "node-a" / "gpt").exists()
    assert not (tmp_path / "node-b" / "gpt").exists()
    assert kept.is_dir()
    write_snapshot_files(tmp_path, "node-a", "gpt", 1, 10, [0, 1])  # a straggling writer
    assert [i.task_id for i in store.infos()] == ["bert"]
    store.gc()
    assert not (tmp_path / "node-a" / "gpt").exists()
