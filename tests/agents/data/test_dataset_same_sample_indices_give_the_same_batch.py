"""A micro-batch's identity is its global sample indices: independently built datasets (other
processes, other cache directories) give identical tensors for the same indices."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agents.training.dataset import Batch, RecipeDatasets, build_datasets, global_sample_indices
from controlplane.core.recipe import DataSection

ROOT = Path(__file__).resolve().parents[3]
INDEX_LISTS = [[0, 1], [17, 5, 255], [128], list(range(100, 108))]


def _build(root: Path, cache: Path, split: str = "90,10,0") -> RecipeDatasets:
    data = DataSection.model_validate(
        {"tokenizer": f"{root}/tokenizer.json", "blend": [{"path_prefix": f"{root}/pydoc"}], "split": split}
    )
    return build_datasets(
        data, seq_length=32, seed=1234, train_samples=256, valid_samples=32, cache_dir=cache
    )


def _equal(a: Batch, b: Batch) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_two_builds_with_their_own_caches_give_identical_batches(
    prepared_corpus: Path, tmp_path: Path
) -> None:
    a = _build(prepared_corpus, tmp_path / "cache-a")
    b = _build(prepared_corpus, tmp_path / "cache-b")
    for indices in INDEX_LISTS:
        assert _equal(a.micro_batch(indices), b.micro_batch(indices))
    assert _equal(a.micro_batch([3, 4], "valid"), b.micro_batch([3, 4], "valid"))
    # Different indices are different samples (the comparison above can fail).
    assert not torch.equal(a.micro_batch([0]).tokens, a.micro_batch([1]).tokens)
    # A different seed shuffles differently.
    other = build_datasets(
        DataSection.model_validate(
            {
                "tokenizer": f"{prepared_corpus}/tokenizer.json",
                "blend": [{"path_prefix": f"{prepared_corpus}/pydoc"}],
                "split": "90,10,0",
            }
        ),
        seq_length=32,
        seed=99,
        train_samples=256,
        valid_samples=32,
        cache_dir=tmp_path / "cache-c",
    )
    assert not _equal(a.micro_batch(list(range(8))), other.micro_batch(list(range(8))))


def test_a_batch_is_next_token_prediction_over_the_corpus(prepared_corpus: Path, tmp_path: Path) -> None:
    batch = _build(prepared_corpus, tmp_path / "cache").micro_batch([7, 8])
    assert (
        batch.tokens.shape
        == batch.labels.shape
        == batch.loss_mask.shape
        == batch.position_ids.shape
        == (2, 32)
    )
    assert batch.tokens.dtype == batch.labels.dtype == torch.int64
    assert torch.equal(batch.tokens[:, 1:], batch.labels[:, :-1])
    assert torch.equal(batch.position_ids[0], torch.arange(32))
    assert bool((batch.loss_mask == 1).all())


def test_two_processes_building_into_one_cache_give_identical_batches(
    prepared_corpus: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "shared-cache"
    lists = [",".join(map(str, lst)) for lst in INDEX_LISTS]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.agents.data.dataset_probe",
                str(prepared_corpus),
                str(cache),
                str(tmp_path / f"out-{n}.pt"),
                *lists,
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for n in range(2)
    ]
    for p in procs:
        out, _ = p.communicate(timeout=280)
        assert p.returncode == 0, out
    first, second = (torch.load(tmp_path / f"out-{n}.pt") for n in range(2))
    here = _build(prepared_corpus, cache)
    for a, b, indices in zip(first, second, INDEX_LISTS, strict=True):
        assert _equal(Batch(*a), Batch(*b))
        assert _equal(Batch(*a), here.micro_batch(indices))


def test_global_sample_indices_follow_iteration_and_micro_batch() -> None:
    assert global_sample_indices(0, 0, 2, 8) == [0, 1]
    assert global_sample_indices(3, 1, 2, 8) == [26, 27]
    every = [k for j in range(4) for k in global_sample_indices(5, j, 2, 8)]
    assert every == list(range(40, 48))
    with pytest.raises(ValueError, match="micro-batch 4"):
        global_sample_indices(0, 4, 2, 8)


def test_an_index_beyond_the_built_samples_is_refused(prepared_corpus: Path, tmp_path: Path) -> None:
    datasets = _build(prepared_corpus, tmp_path / "cache")
    with pytest.raises(IndexError, match="outside the"):
        datasets.micro_batch([len(datasets.train)])
