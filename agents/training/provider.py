"""Model providers: the function that builds one rank's model (the recipe's ``model.provider``).

A provider has the shape of Megatron-LM's ``model_provider(pre_process, post_process)``: it gets a
:class:`ProviderContext` — the recipe's model section, the ``TransformerConfig`` the worker built from
it (shape, parallel sizes, dtype, per-token loss), the pipeline stage's ``pre_process`` /
``post_process`` flags, the vocabulary size and the sequence length — and returns a Megatron-Core
module (:class:`megatron.core.transformer.module.MegatronModule`) for this rank's shard:

- its forward takes ``(tokens, position_ids, attention_mask, labels=labels)`` (``[b, s]`` int64 tensors;
  the worker passes ``attention_mask=None``: causal) and returns the loss per token (``[b, s]``) on
  the last pipeline stage, the hidden states on the others — as ``GPTModel`` does; the worker's own
  ``forward_step`` sums it per micro-batch (partial-result reuse, docs/ARCHITECTURE.md §7.6);
- with ``pipeline_model_parallel_size > 1`` it takes its input through ``set_input_tensor``;
- ``sharded_state_dict()`` describes its parameters for ``dist_checkpointing`` (checkpoints,
  in-memory snapshots, resharding on a layout change) and its parameter names are the same on every
  rank of a data-parallel group (live migration copies them by name).

``None`` (no ``model.provider``) is :func:`gpt_provider`, the built-in GPT. The import path is
resolved in the worker (:func:`resolve_provider`); a provider that cannot be imported, is not
callable, or returns something that is not a Megatron-Core module raises :class:`ProviderError`,
which the control plane treats as a failure of the task (a restart would fail the same way), not of
the node.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from controlplane.core.recipe.model import ModelSection

if TYPE_CHECKING:
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.module import MegatronModule


class ProviderError(Exception):
    """The recipe's ``model.provider`` cannot build the model; the message names the field and the
    path (a failure of the task, never retried on another node)."""


@dataclass(frozen=True)
class ProviderContext:
    """What a provider builds one rank's model from."""

    section: ModelSection | None
    """The recipe's model section (None: a task given by its shape alone: multi-head attention, GELU,
    learned positions, LayerNorm, untied embeddings)."""
    config: TransformerConfig
    """The worker's ``TransformerConfig``: layers, hidden size, heads, the section's options, TP/PP
    sizes, float32 parameters, ``calculate_per_token_loss``."""
    pre_process: bool
    """This rank's stage holds the input (embedding): the first pipeline stage."""
    post_process: bool
    """This rank's stage computes the loss: the last pipeline stage."""
    vocab_size: int
    seq_length: int


ModelProvider = Callable[[ProviderContext], "MegatronModule"]


def gpt_provider(ctx: ProviderContext) -> MegatronModule:
    """The built-in provider: Megatron-Core's ``GPTModel`` with the local (Transformer Engine free)
    layer spec, as the recipe's model section describes it."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    arch = ctx.section
    return GPTModel(
        config=ctx.config,
        transformer_layer_spec=get_gpt_layer_local_spec(
            normalization=arch.normalization if arch is not None else "LayerNorm"
        ),
        vocab_size=ctx.vocab_size,
        max_sequence_length=ctx.seq_length,
        pre_process=ctx.pre_process,
        post_process=ctx.post_process,
        share_embeddings_and_output_weights=arch is not None and not arch.untie_embeddings,
        position_embedding_type="rope"
        if arch is not None and arch.position_embedding == "rope"
        else "learned_absolute",
    )


def resolve_provider(path: str | None) -> ModelProvider:
    """The provider a recipe names (``package.module:function``); None: :func:`gpt_provider`.
    :class:`ProviderError` naming ``model.provider`` when it cannot be imported or is not callable."""
    if path is None:
        return gpt_provider
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ProviderError(f"model.provider: {path!r} is not an import path 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or anything the module raises while it is imported
        raise ProviderError(
            f"model.provider: cannot import {module_name!r} ({type(exc).__name__}: {exc})"
        ) from None
    fn = getattr(module, attr, None)
    if fn is None:
        raise ProviderError(f"model.provider: module {module_name!r} has no {attr!r}")
    if not callable(fn):
        raise ProviderError(f"model.provider: {path} is not callable (a {type(fn).__name__})")
    provider: ModelProvider = fn
    return provider


def build_model(path: str | None, ctx: ProviderContext) -> MegatronModule:
    """Call the provider ``path`` names on ``ctx`` and check what it returns. :class:`ProviderError`
    naming ``model.provider`` when it cannot be resolved or returns no Megatron-Core module with a
    ``sharded_state_dict``; an exception the provider itself raises goes through unchanged (an error in
    the training code, handled as such)."""
    from megatron.core.transformer.module import MegatronModule

    provider = resolve_provider(path)
    name = path or "the built-in GPT"
    model: Any = provider(ctx)  # what it raises is the training code's own exception
    if not isinstance(model, MegatronModule):
        raise ProviderError(
            f"model.provider: {name} returned a {type(model).__module__}.{type(model).__qualname__}, "
            "not a Megatron-Core module (megatron.core.transformer.module.MegatronModule)"
        )
    if not callable(getattr(model, "sharded_state_dict", None)):
        raise ProviderError(f"model.provider: the module {name} returned has no sharded_state_dict()")
    return model
