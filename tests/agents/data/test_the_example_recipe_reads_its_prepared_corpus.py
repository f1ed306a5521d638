"""The documented path end to end: the corpus command, prepare with a trained tokenizer, and the
example recipe's data section read back as batches of real text."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agents.data.__main__ import main
from agents.training.dataset import build_datasets, global_sample_indices
from controlplane.core.recipe import load_recipe

EXAMPLE = Path(__file__).resolve().parents[3] / "agents" / "data" / "recipes" / "tiny-gpt.yaml"


def test_the_example_recipe_reads_batches_of_the_prepared_corpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = load_recipe(EXAMPLE.read_text())
    data_dir = tmp_path / ".run" / "data" / "pydoc"
    assert main(["corpus", "--output", str(data_dir), "--max-bytes", "600000"]) == 0
    assert (
        main(
            [
                "prepare",
                "--input",
                str(data_dir / "corpus.jsonl"),
                "--output",
                str(data_dir / "pydoc"),
                "--train-tokenizer",
                "--vocab-size",
                "2048",
                "--append-eod",
            ]
        )
        == 0
    )
    capsys.readouterr()

    train_samples, valid_samples = recipe.samples()
    datasets = build_datasets(
        recipe.data,
        seq_length=recipe.model.seq_length,
        seed=recipe.seed,
        train_samples=train_samples,
        valid_samples=valid_samples,
        cache_dir=tmp_path / "cache",
        base_dir=tmp_path,
    )
    assert datasets.tokenizer.vocab_size == 2048
    assert recipe.to_spec(datasets.tokenizer.vocab_size).vocab_size == 2048
    last = recipe.iterations - 1
    per_iteration = recipe.global_batch_size // recipe.micro_batch_size
    batch = datasets.micro_batch(
        global_sample_indices(last, per_iteration - 1, recipe.micro_batch_size, recipe.global_batch_size)
    )
    assert batch.tokens.shape == (recipe.micro_batch_size, recipe.model.seq_length)
    assert int(batch.tokens.max()) < 2048
    text = datasets.tokenizer.detokenize(batch.tokens[0].tolist())
    assert len(text) > recipe.model.seq_length  # tokens of real text are longer than one character
    valid = datasets.micro_batch([valid_samples - 1], "valid")
    assert bool(torch.equal(valid.tokens[:, 1:], valid.labels[:, :-1]))
