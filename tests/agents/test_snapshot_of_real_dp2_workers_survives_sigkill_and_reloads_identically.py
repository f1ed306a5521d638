"""Real DP2 Megatron workers snapshot every 5 iterations into the agent's shm directory; both are
SIGKILLed mid-training; the newest complete snapshot is still listed, and new workers restore from it
to exactly the parameters and Adam state the killed workers had at that iteration."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from agents.snapshots import SnapshotStore, SnapshotStoreConfig
from agents.worker_handle import kill_group
from tests.agents.helpers import free_port
from tests.agents.snapshot_worker import run_ranks, spawn_ranks

pytestmark = pytest.mark.slow


def _complete(root: Path) -> list[Path]:
    return sorted(root.glob("node-a/gpt/*/COMPLETE"))


def _assert_same(a: dict, b: dict) -> None:  # type: ignore[type-arg]
    assert a["model"].keys() == b["model"].keys()
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert a["optimizer_state"].keys() == b["optimizer_state"].keys()
    assert a["optimizer_state"]  # Adam has state after training: the comparison is not vacuous
    for pid, st in a["optimizer_state"].items():
        assert st.keys() == b["optimizer_state"][pid].keys() == {"exp_avg", "exp_avg_sq", "step"}
        for k in st:
            assert torch.equal(torch.as_tensor(st[k]), torch.as_tensor(b["optimizer_state"][pid][k])), (
                pid,
                k,
            )


def test_a_snapshot_survives_sigkill_and_reloads_to_identical_state(tmp_path: Path) -> None:
    shm, ref = tmp_path / "shm", tmp_path / "ref"
    port = free_port()
    cfgs = [
        {
            "rank": r,
            "world": 2,
            "port": port,
            "iterations": 100_000,
            "interval": 5,
            "root": str(shm),
            "ref_dir": str(ref),
        }
        for r in (0, 1)
    ]
    procs = spawn_ranks(cfgs, tmp_path / "train")
    try:
        deadline = time.monotonic() + 120
        while len(_complete(shm)) < 3:
            assert all(p.poll() is None for p in procs), "a training rank died"
            assert time.monotonic() < deadline, "no snapshots"
            time.sleep(0.05)
    finally:
        for p in procs:
            p.kill()  # SIGKILL, mid-training
        for p in procs:
            p.wait()
            kill_group(p.pid)  # the helpers dist_checkpointing started live on in the rank's session
    assert [p.returncode for p in procs] == [-9, -9]

    store = SnapshotStore("node-a", SnapshotStoreConfig(root=shm))
    store.gc()
    [info] = store.infos()
    assert (info.task_id, info.epoch, info.ranks, info.origin_node) == ("gpt", 1, [0, 1], "node-a")
    assert info.iteration >= 14
    assert (info.iteration + 1) % 5 == 0
    paths = store.paths("gpt", info.iteration)

    port = free_port()
    restore = [
        {
            "rank": r,
            "world": 2,
            "port": port,
            "iterations": 0,
            "restore": [str(p) for p in paths],
            "dump": str(tmp_path / f"restored{r}.pt"),
        }
        for r in (0, 1)
    ]
    run_ranks(restore, tmp_path / "restore")
    for r in (0, 1):
        restored = torch.load(tmp_path / f"restored{r}.pt")
        _assert_same(restored, torch.load(ref / f"rank{r}_it{info.iteration}.pt"))
        earlier = torch.load(ref / f"rank{r}_it{info.iteration - 5}.pt")
        assert not all(torch.equal(restored["model"][k], earlier["model"][k]) for k in earlier["model"])
