"""Deterministic synthetic data: every micro-batch has a global identity (iteration, index).

A global batch of iteration ``i`` is ``global_batch / micro_batch`` micro-batches with global indices
``0..n-1``; data-parallel replica ``r`` of ``dp`` owns a contiguous slice of them. The content of
micro-batch ``(i, k)`` depends only on ``(seed, i, k)``, so any replica, after any reconfiguration,
can recompute exactly the micro-batches a failed replica did not finish (docs/ARCHITECTURE.md §7.6).

Held-out (validation) micro-batch ``(v, k)`` of validation iteration ``v`` is drawn the same way from a
seed no train micro-batch uses (that of iteration ``-(v + 1)``): the same distribution, never trained on.

Sequences are arithmetic progressions modulo the vocabulary (random start and stride), which a
small GPT learns quickly: the loss visibly falls, so a broken update is noticed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MicroBatchId:
    iteration: int
    index: int


@dataclass(frozen=True)
class MicroBatch:
    id: MicroBatchId
    tokens: torch.Tensor  # [micro_batch, seq_len] int64
    labels: torch.Tensor  # [micro_batch, seq_len] int64 (next token)
    position_ids: torch.Tensor  # [micro_batch, seq_len]


class SyntheticSampler:
    def __init__(self, seed: int, vocab: int, seq_len: int, micro_batch: int, global_batch: int) -> None:
        if global_batch % micro_batch:
            raise ValueError(f"global batch {global_batch} is not a multiple of micro-batch {micro_batch}")
        self.seed, self.vocab, self.seq_len, self.micro_batch_size = seed, vocab, seq_len, micro_batch
        self.num_micro_batches = global_batch // micro_batch

    def indices_for(self, dp_rank: int, dp_size: int) -> list[int]:
        """Global micro-batch indices owned by data-parallel replica ``dp_rank`` of ``dp_size``."""
        if self.num_micro_batches % dp_size:
            raise ValueError(f"{self.num_micro_batches} micro-batches do not divide among {dp_size} replicas")
        per = self.num_micro_batches // dp_size
        return list(range(dp_rank * per, (dp_rank + 1) * per))

    def micro_batch(self, iteration: int, index: int) -> MicroBatch:
        gen = torch.Generator().manual_seed((self.seed * 1_000_003 + iteration) * 10_007 + index)
        start = torch.randint(0, self.vocab, (self.micro_batch_size, 1), generator=gen)
        stride = torch.randint(1, 4, (self.micro_batch_size, 1), generator=gen)
        steps = torch.arange(self.seq_len + 1).unsqueeze(0)
        seq = (start + stride * steps) % self.vocab
        positions = torch.arange(self.seq_len).unsqueeze(0).expand(self.micro_batch_size, -1)
        return MicroBatch(
            MicroBatchId(iteration, index), seq[:, :-1].contiguous(), seq[:, 1:].contiguous(), positions
        )

    def validation_micro_batch(self, iteration: int, index: int) -> MicroBatch:
        """Held-out micro-batch ``index`` of validation iteration ``iteration`` (seeds disjoint from
        every train micro-batch's)."""
        if iteration < 0:
            raise ValueError(f"validation iteration must be >= 0 (got {iteration})")
        batch = self.micro_batch(-(iteration + 1), index)
        return MicroBatch(MicroBatchId(iteration, index), batch.tokens, batch.labels, batch.position_ids)

    def for_replica(self, iteration: int, dp_rank: int, dp_size: int) -> list[MicroBatch]:
        return [self.micro_batch(iteration, k) for k in self.indices_for(dp_rank, dp_size)]
