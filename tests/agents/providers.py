"""Model providers for tests (``model.provider: tests.agents.providers:<function>``).

:func:`qk_norm_gpt` is a model other than the built-in GPT: a GPT whose layers are a different
Megatron-Core layer spec — queries and keys normalized per head (QK layernorm) before the rotary
positions, RMSNorm everywhere, untied embeddings — whatever the recipe's model section says about
normalization, positions or tying; with ``UNICRON_TEST_PROVIDER_LOG`` set it appends one line per model
it builds to that file (``pid pre_process post_process``), so a test sees which processes built it. The
others are what a broken provider looks like.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from agents.training.provider import ProviderContext

if TYPE_CHECKING:
    from megatron.core.transformer.module import MegatronModule


def qk_norm_gpt(ctx: ProviderContext) -> MegatronModule:
    """A GPT with QK layernorm, RMSNorm, rotary positions and untied embeddings."""
    from dataclasses import replace

    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    if log := os.environ.get("UNICRON_TEST_PROVIDER_LOG"):
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {int(ctx.pre_process)} {int(ctx.post_process)}\n")
    return GPTModel(
        config=replace(ctx.config, normalization="RMSNorm"),
        transformer_layer_spec=get_gpt_layer_local_spec(qk_layernorm=True, normalization="RMSNorm"),
        vocab_size=ctx.vocab_size,
        max_sequence_length=ctx.seq_length,
        pre_process=ctx.pre_process,
        post_process=ctx.post_process,
        share_embeddings_and_output_weights=False,
        position_embedding_type="rope",
    )


def not_a_module(ctx: ProviderContext) -> object:
    """Returns a plain ``torch.nn.Linear``: no Megatron-Core module, no ``sharded_state_dict``."""
    import torch

    return torch.nn.Linear(ctx.config.hidden_size, ctx.vocab_size)


NOT_CALLABLE = 42
