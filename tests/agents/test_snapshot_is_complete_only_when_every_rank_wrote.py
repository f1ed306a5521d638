"""A snapshot directory gets its COMPLETE marker only after every rank of the task wrote its shard
(counted in the epoch's TCPStore); the shards then load back, assembled into another sharding."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from agents.training.snapshot import (
    COMPLETE,
    ShardPosition,
    SnapshotError,
    SnapshotWriter,
    find_snapshot,
    load_snapshot,
)
from tests.agents.helpers import free_port


def _writer(root: Path, rank: int, port: int, timeout_s: float = 10.0) -> SnapshotWriter:
    return SnapshotWriter(
        root=root,
        origin="node-a",
        task_id="gpt",
        epoch=3,
        rank=rank,
        world_size=2,
        interval=5,
        store_addr=("127.0.0.1", port),
        position=ShardPosition(tp=2, pp=1, dp=1, tp_rank=rank, pp_rank=0, dp_rank=0),
        complete_timeout_s=timeout_s,
    )


def _state(rank: int, weight: torch.Tensor, step: float) -> dict[str, object]:
    from megatron.core.dist_checkpointing.mapping import ShardedTensor

    half = weight.chunk(2, dim=0)[rank].clone()  # TP2: rows split in two
    return {
        "model": {"w": ShardedTensor.from_rank_offsets("w", half, (0, rank, 2))},
        "step": torch.tensor(step),
    }


def test_complete_only_after_every_rank_then_loads_resharded(tmp_path: Path) -> None:
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)  # type: ignore[attr-defined]
    weight = torch.arange(24, dtype=torch.float32).reshape(6, 4)
    w0, w1 = _writer(tmp_path, 0, port), _writer(tmp_path, 1, port)
    try:
        assert not w0.maybe_snapshot(8, lambda: _state(0, weight, 9.0))  # not due: (8 + 1) % 5
        assert w0.maybe_snapshot(9, lambda: _state(0, weight, 10.0))
        d = w0.path(9)
        deadline = time.monotonic() + 10
        while not (d / "rank_00000.json").exists():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.3)
        assert not (d / COMPLETE).exists()  # rank 1 has not written its shard
        with pytest.raises(SnapshotError):
            find_snapshot(tmp_path, "gpt", 9)

        assert w1.maybe_snapshot(9, lambda: _state(1, weight, 10.0))
        assert w0.wait_idle(10)
        assert w1.wait_idle(10)
        assert (w0.stats.completed, w1.stats.completed) == (1, 1)
        paths = find_snapshot(tmp_path, "gpt", 9)
        assert paths == [d]

        from megatron.core.dist_checkpointing.mapping import ShardedTensor

        # TP1: one rank asks for the whole tensor; it is assembled from both TP halves
        target = {
            "model": {"w": ShardedTensor.from_rank_offsets("w", torch.zeros(6, 4))},
            "step": torch.tensor(0.0),
        }
        state, iteration = load_snapshot(paths, target)
        assert iteration == 9
        assert torch.equal(state["model"]["w"], weight)
        assert float(state["step"]) == 10.0
    finally:
        w0.close()
        w1.close()
        del store


def test_a_rank_that_never_writes_leaves_the_snapshot_incomplete(tmp_path: Path) -> None:
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)  # type: ignore[attr-defined]
    w0 = _writer(tmp_path, 0, port, timeout_s=0.5)
    try:
        assert w0.maybe_snapshot(4, lambda: _state(0, torch.ones(6, 4), 5.0))
        assert w0.wait_idle(10)
        assert (w0.stats.completed, w0.stats.incomplete) == (0, 1)
        assert not (w0.path(4) / COMPLETE).exists()
    finally:
        w0.close()
        del store


def test_a_directory_left_by_an_earlier_run_is_not_taken_for_this_ones(tmp_path: Path) -> None:
    """Same task, epoch and iteration as an earlier run (an agent restart, a rerun): its COMPLETE
    marker and its extra rank shards do not make this run's half-written snapshot look complete."""
    from tests.agents.snapshot_worker import write_snapshot_files

    stale = write_snapshot_files(tmp_path, "node-a", "gpt", 3, 9, [0, 1, 5])
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)  # type: ignore[attr-defined]
    weight = torch.arange(24, dtype=torch.float32).reshape(6, 4)
    w0, w1 = _writer(tmp_path, 0, port), _writer(tmp_path, 1, port)
    try:
        assert w0.path(9) == stale
        assert w0.maybe_snapshot(9, lambda: _state(0, weight, 10.0))
        deadline = time.monotonic() + 10
        while w0.stats.last_write_s == 0.0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not (stale / COMPLETE).exists()  # the earlier run's marker is gone before our shard lands
        assert w1.maybe_snapshot(9, lambda: _state(1, weight, 10.0))
        assert w0.wait_idle(10)
        assert w1.wait_idle(10)
        from agents.training.snapshot import read_rank_metas

        assert [m.rank for m in read_rank_metas(stale)] == [0, 1]  # not the stale rank 5
        assert {m.run for m in read_rank_metas(stale)} == {f"127.0.0.1:{port}"}
    finally:
        w0.close()
        w1.close()
        del store
