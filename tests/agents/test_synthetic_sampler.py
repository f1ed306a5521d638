"""Every micro-batch has a global identity (iteration, index) and the same content wherever computed."""

from __future__ import annotations

import pytest
import torch

from agents.training.data import SyntheticSampler


def test_same_identity_same_content() -> None:
    a = SyntheticSampler(7, 128, 32, 2, 8).micro_batch(5, 3)
    b = SyntheticSampler(7, 128, 32, 2, 8).micro_batch(5, 3)
    assert torch.equal(a.tokens, b.tokens)
    assert torch.equal(a.labels, b.labels)
    assert (a.id.iteration, a.id.index) == (5, 3)


def test_different_identity_different_content() -> None:
    s = SyntheticSampler(7, 128, 32, 2, 8)
    assert not torch.equal(s.micro_batch(5, 3).tokens, s.micro_batch(5, 2).tokens)
    assert not torch.equal(s.micro_batch(5, 3).tokens, s.micro_batch(6, 3).tokens)


def test_labels_are_the_next_tokens() -> None:
    mb = SyntheticSampler(1, 128, 32, 2, 8).micro_batch(0, 0)
    assert torch.equal(mb.tokens[:, 1:], mb.labels[:, :-1])


def test_replicas_partition_the_global_batch() -> None:
    s = SyntheticSampler(1, 128, 32, 2, 8)  # 4 micro-batches
    assert [s.indices_for(r, 2) for r in range(2)] == [[0, 1], [2, 3]]
    assert sorted(i for r in range(4) for i in s.indices_for(r, 4)) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="do not divide"):
        s.indices_for(0, 3)
