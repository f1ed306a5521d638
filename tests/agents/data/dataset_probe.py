"""Run as a separate process: build a prepared corpus's datasets and save the micro-batches of given
global sample indices (``python -m tests.agents.data.dataset_probe DIR CACHE OUT I,J,K ...``)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from agents.training.dataset import build_datasets
from controlplane.core.recipe import DataSection


def main(root: str, cache: str, out: str, *index_lists: str) -> None:
    data = DataSection.model_validate(
        {
            "tokenizer": f"{root}/tokenizer.json",
            "blend": [{"path_prefix": f"{root}/pydoc"}],
            "split": "90,10,0",
        }
    )
    datasets = build_datasets(
        data, seq_length=32, seed=1234, train_samples=256, valid_samples=32, cache_dir=Path(cache)
    )
    batches = [datasets.micro_batch([int(i) for i in lst.split(",")]) for lst in index_lists]
    torch.save([tuple(b) for b in batches], out)


if __name__ == "__main__":
    main(*sys.argv[1:])
