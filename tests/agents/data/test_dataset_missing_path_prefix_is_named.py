"""Data a node cannot read is reported with the recipe field and the path (a task failure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.training.dataset import DatasetError, build_datasets
from controlplane.core.recipe import DataSection


def _build(data: dict[str, object], cache: Path, base_dir: Path | None = None) -> None:
    build_datasets(
        DataSection.model_validate(data),
        seq_length=16,
        seed=1,
        train_samples=10,
        valid_samples=0,
        cache_dir=cache,
        base_dir=base_dir,
    )


def test_a_missing_path_prefix_names_the_field_and_the_path(two_token_ranges: Path, tmp_path: Path) -> None:
    root = two_token_ranges
    missing = tmp_path / "nowhere" / "corpus_text_document"
    data = {
        "tokenizer": f"{root}/tokenizer.json",
        "train": [{"path_prefix": f"{root}/low"}, {"path_prefix": str(missing)}],
    }
    with pytest.raises(DatasetError) as refused:
        _build(data, tmp_path / "cache")
    assert str(refused.value) == (
        f"data.train.1.path_prefix: no indexed dataset at {missing} ({missing}.bin, {missing}.idx not found)"
    )
    assert not (tmp_path / "cache").exists()


def test_a_prefix_with_only_its_bin_names_the_missing_idx(two_token_ranges: Path, tmp_path: Path) -> None:
    (tmp_path / "half.bin").write_bytes((two_token_ranges / "low.bin").read_bytes())
    data = {
        "tokenizer": f"{two_token_ranges}/tokenizer.json",
        "blend": [{"path_prefix": "half"}],
        "split": "1,0,0",
    }
    with pytest.raises(DatasetError, match=rf"data\.blend\.0\.path_prefix: .*{tmp_path}/half\.idx not found"):
        _build(data, tmp_path / "cache", base_dir=tmp_path)


def test_a_missing_tokenizer_is_named(two_token_ranges: Path, tmp_path: Path) -> None:
    data = {
        "tokenizer": str(tmp_path / "tokenizer.json"),
        "train": [{"path_prefix": f"{two_token_ranges}/low"}],
    }
    with pytest.raises(DatasetError, match=f"data.tokenizer: tokenizer not found: {tmp_path}/tokenizer.json"):
        _build(data, tmp_path / "cache")


def test_relative_prefixes_are_read_from_the_base_directory(two_token_ranges: Path, tmp_path: Path) -> None:
    data = {"tokenizer": "tokenizer.json", "train": [{"path_prefix": "low"}]}
    _build(data, tmp_path / "cache", base_dir=two_token_ranges)
    assert any((tmp_path / "cache").iterdir())


def test_a_split_share_without_documents_is_named(two_token_ranges: Path, tmp_path: Path) -> None:
    # 400 documents: a 0.1 % validation share rounds to none, which megatron-core would try to fill
    # with epochs of nothing for ever.
    data = {
        "tokenizer": f"{two_token_ranges}/tokenizer.json",
        "blend": [{"path_prefix": f"{two_token_ranges}/low"}],
        "split": "999,1,0",
    }
    with pytest.raises(DatasetError) as refused:
        _build(data, tmp_path / "cache")
    assert str(refused.value) == (
        f'data.split: the validation share of "999,1,0" gives no document of {two_token_ranges}/low '
        "(400 documents); make the share larger (or 0) or the dataset bigger"
    )
