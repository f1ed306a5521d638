"""With a data section in the launch, the training step's data source is the recipe's data read by
global sample index: the same (iteration, micro-batch) gives the same real-text tokens in any process,
and a model vocabulary smaller than the tokenizer's is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agents.training.dataset import DatasetError, RecipeSampler, global_sample_indices
from controlplane.core.protocol import WorkerLaunch
from tests.contract.samples import LAUNCH


def launch_with_data(root: Path) -> WorkerLaunch:
    data = {
        "tokenizer": f"{root}/tokenizer.json",
        "blend": [{"path_prefix": f"{root}/pydoc"}],
        "split": "100,0,0",
    }
    # the wire form: the launch as the agent decodes it from the coordinator's JSON
    raw = LAUNCH.model_dump(mode="json") | {"iterations": 6, "data": data}
    return WorkerLaunch.model_validate_json(WorkerLaunch.model_validate(raw).model_dump_json())


def sampler(launch: WorkerLaunch, cache: Path, vocab: int = 512) -> RecipeSampler:
    assert launch.data is not None
    spec = launch.model
    return RecipeSampler(
        launch.data,
        seq_length=spec.seq_len,
        seed=launch.seed,
        micro_batch=spec.micro_batch,
        global_batch=spec.global_batch,
        iterations=launch.iterations,
        vocab_size=vocab,
        cache_dir=cache,
    )


def test_micro_batches_are_the_samples_at_their_global_indices(prepared_corpus: Path, tmp_path: Path) -> None:
    launch = launch_with_data(prepared_corpus)
    a, b = sampler(launch, tmp_path / "a"), sampler(launch, tmp_path / "b")
    spec = launch.model

    mb = a.micro_batch(5, 3)

    assert mb.tokens.shape == (spec.micro_batch, spec.seq_len)
    assert mb.id.iteration == 5
    assert mb.id.index == 3
    expected = a.datasets.micro_batch(global_sample_indices(5, 3, spec.micro_batch, spec.global_batch))
    assert torch.equal(mb.tokens, expected.tokens)
    assert torch.equal(mb.labels, expected.labels)
    assert torch.equal(b.micro_batch(5, 3).tokens, mb.tokens)
    assert not torch.equal(a.micro_batch(5, 2).tokens, mb.tokens)
    assert int(mb.tokens.max()) < 512
    assert a.num_micro_batches == spec.global_batch // spec.micro_batch


def test_a_model_vocabulary_below_the_tokenizers_is_refused_by_name(
    prepared_corpus: Path, tmp_path: Path
) -> None:
    with pytest.raises(DatasetError, match=r"model\.vocab_size: 128 is smaller than the tokenizer's 512"):
        sampler(launch_with_data(prepared_corpus), tmp_path / "c", vocab=128)
