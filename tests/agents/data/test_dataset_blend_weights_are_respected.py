"""Blended datasets draw from each path prefix in proportion to its weight."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.training.dataset import RecipeDatasets, build_datasets
from controlplane.core.recipe import DataSection

SAMPLES = 400


def _share_of_low(datasets: RecipeDatasets, split: str, n: int) -> float:
    """Share of samples drawn from the "low" dataset (token ids < 100; "high" ids are >= 200)."""
    low = 0
    for k in range(n):
        tokens = datasets.micro_batch([k], split).tokens
        # Padding maps to 0, so a sample is "low" when all its non-zero tokens are < 100.
        real = tokens[tokens > 0]
        assert bool((real < 100).all()) or bool((real >= 200).all()), "a sample mixes two datasets"
        low += int(bool((real < 100).all()))
    return low / n


@pytest.mark.parametrize(("low_weight", "high_weight"), [(1.0, 3.0), (0.7, 0.3)])
def test_train_and_valid_blends_follow_their_weights(
    two_token_ranges: Path, tmp_path: Path, low_weight: float, high_weight: float
) -> None:
    root = two_token_ranges
    data = DataSection.model_validate(
        {
            "tokenizer": f"{root}/tokenizer.json",
            "train": [
                {"path_prefix": f"{root}/low", "weight": low_weight},
                {"path_prefix": f"{root}/high", "weight": high_weight},
            ],
            "valid": [{"path_prefix": f"{root}/low"}, {"path_prefix": f"{root}/high"}],
        }
    )
    datasets = build_datasets(
        data, seq_length=16, seed=5, train_samples=SAMPLES, valid_samples=100, cache_dir=tmp_path / "cache"
    )
    expected = low_weight / (low_weight + high_weight)
    assert _share_of_low(datasets, "train", SAMPLES) == pytest.approx(expected, abs=0.05)
    assert _share_of_low(datasets, "valid", 100) == pytest.approx(0.5, abs=0.1)


def test_one_blend_cut_by_a_split_follows_its_weights(two_token_ranges: Path, tmp_path: Path) -> None:
    root = two_token_ranges
    data = DataSection.model_validate(
        {
            "tokenizer": f"{root}/tokenizer.json",
            "blend": [
                {"path_prefix": f"{root}/low", "weight": 4},
                {"path_prefix": f"{root}/high", "weight": 1},
            ],
            "split": "90,5,5",
        }
    )
    datasets = build_datasets(
        data, seq_length=16, seed=5, train_samples=SAMPLES, valid_samples=50, cache_dir=tmp_path / "cache"
    )
    assert _share_of_low(datasets, "train", SAMPLES) == pytest.approx(0.8, abs=0.05)
