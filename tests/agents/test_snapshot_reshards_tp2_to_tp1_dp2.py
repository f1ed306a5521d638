"""A snapshot written by TP2 workers loads at TP1·DP2 to the same full parameters and Adam state that
megatron's own resharding loader (dist_checkpointing, saved at the same iteration) gives."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agents.training.snapshot import find_snapshot
from tests.agents.helpers import free_port
from tests.agents.snapshot_worker import run_ranks

pytestmark = pytest.mark.slow


def test_tp2_snapshot_loads_at_tp1_dp2_like_dist_checkpointing(tmp_path: Path) -> None:
    shm, ckpt = tmp_path / "shm", tmp_path / "ckpt"
    port = free_port()
    train = [
        {
            "rank": r,
            "world": 2,
            "tp": 2,
            "port": port,
            "iterations": 10,
            "interval": 5,
            "root": str(shm),
            "dist_ckpt": {"iteration": 9, "dir": str(ckpt)},
        }
        for r in (0, 1)
    ]
    run_ranks(train, tmp_path / "train")
    paths = find_snapshot(shm, "gpt", 9)

    port = free_port()
    reshard = [
        {
            "rank": r,
            "world": 2,
            "tp": 1,
            "port": port,
            "iterations": 0,
            "restore": [str(p) for p in paths],
            "compare_dist_ckpt": str(ckpt),
            "dump": str(tmp_path / f"tp1_rank{r}.pt"),
        }
        for r in (0, 1)
    ]
    run_ranks(reshard, tmp_path / "reshard")
    fresh_port = free_port()
    run_ranks(
        [
            {
                "rank": r,
                "world": 2,
                "port": fresh_port,
                "iterations": 0,
                "dump": str(tmp_path / f"fresh{r}.pt"),
            }
            for r in (0, 1)
        ],
        tmp_path / "fresh",
    )
    for r in (0, 1):
        ours = torch.load(tmp_path / f"tp1_rank{r}.pt")
        theirs = torch.load(tmp_path / f"tp1_rank{r}.dist_ckpt.pt")
        fresh = torch.load(tmp_path / f"fresh{r}.pt")
        assert ours["model"].keys() == theirs["model"].keys()
        # full (unsharded) TP1 shapes, e.g. the QKV projection of hidden 64 is [192, 64]
        assert ours["model"]["decoder.layers.0.self_attention.linear_qkv.weight"].shape == (192, 64)
        for k in ours["model"]:
            assert torch.equal(ours["model"][k], theirs["model"][k]), k
        assert not torch.equal(
            ours["model"]["decoder.layers.0.self_attention.linear_qkv.weight"],
            fresh["model"]["decoder.layers.0.self_attention.linear_qkv.weight"],
        )
        assert ours["optimizer_state"].keys() == theirs["optimizer_state"].keys() != set()
        for pid, st in ours["optimizer_state"].items():
            for k in st:
                assert torch.equal(torch.as_tensor(st[k]), torch.as_tensor(theirs["optimizer_state"][pid][k]))
