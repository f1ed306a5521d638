"""A snapshot whose replica peer no longer exists is pushed a bounded number of times, then given up."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from agents.snapshots import SnapshotStore, SnapshotStoreConfig
from tests.agents.helpers import free_port
from tests.agents.snapshot_worker import write_snapshot_files


async def test_pushes_to_a_vanished_peer_stop_after_the_configured_attempts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gone = f"127.0.0.1:{free_port()}"  # nothing listens there any more
    store = SnapshotStore(
        "node-a",
        SnapshotStoreConfig(root=tmp_path, scan_interval_s=0.01, replica_attempts=3, replica_backoff_s=0.01),
    )
    store.set_secret("gpt", "00" * 32)
    write_snapshot_files(store.root, "node-a", "gpt", 1, 9, [0], replica=gone)
    with caplog.at_level(logging.WARNING, logger="agents.snapshots"):
        await store.start()
        try:
            await asyncio.sleep(2.0)  # unbounded retries would try ~10 more times by now
        finally:
            await store.close()
    failed = [r for r in caplog.records if "failed" in r.getMessage() and gone in r.getMessage()]
    given_up = [r for r in caplog.records if "giving up" in r.getMessage()]
    assert len(failed) == 3, [r.getMessage() for r in failed]
    assert len(given_up) == 1
