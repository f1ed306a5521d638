"""GPT task specification and its FLOP / parameter / memory arithmetic.

API: :class:`GPTSpec` (frozen) with :meth:`GPTSpec.flops_per_iteration` (Narayanan et al., SC'21,
eq. 3), :meth:`GPTSpec.parameter_count`, :meth:`GPTSpec.model_state_bytes` and
:meth:`GPTSpec.activation_bytes_per_layer` (Korthikanti et al., "Reducing Activation Recomputation
in Large Transformer Models", MLSys'23, §4).

The closed forms assume the GPT-3 layer: multi-head attention, a 4h GeLU MLP, tied input/output
embeddings and learned position embeddings. Grouped-query attention (``num_query_groups``), another
MLP width (``ffn_hidden_size``), a gated (SwiGLU) MLP, untied embeddings and rotary positions are
added as exact correction terms, each zero for the defaults, so a default spec's figures are the
closed forms bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

BYTES_PER_PARAM_MIXED_ADAM: Final = 16
"""fp16/bf16 weights (2) + fp16/bf16 gradients (2) + fp32 master weights (4) + Adam m and v (4 + 4).
Rajbhandari et al., "ZeRO", SC'20, §3.1 (the "16 Psi" accounting)."""

BYTES_PER_ACTIVATION_ELEMENT: Final = 2
"""16-bit activations and communication payloads."""


@dataclass(frozen=True, slots=True)
class GPTSpec:
    """A GPT-style decoder model and its batch (the paper's task model)."""

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    seq_length: int
    vocab_size: int
    global_batch_size: int
    micro_batch_size: int = 1
    num_query_groups: int | None = None
    """Key/value head groups (grouped-query attention); None: one per head (multi-head attention)."""
    ffn_hidden_size: int | None = None
    """Width of the MLP's hidden layer; None: ``4·hidden_size``."""
    gated_mlp: bool = False
    """A gated MLP (SwiGLU): two input projections of width ``ffn_hidden_size`` instead of one."""
    untie_embeddings: bool = False
    """A separate output layer instead of reusing the input embedding (``V·h`` more parameters)."""
    learned_position_embeddings: bool = True
    """A learned ``s x h`` position table; False for rotary embeddings (no parameters)."""

    def __post_init__(self) -> None:
        for name in (
            "num_layers",
            "hidden_size",
            "num_attention_heads",
            "seq_length",
            "vocab_size",
            "global_batch_size",
            "micro_batch_size",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be divisible by num_attention_heads")
        if self.global_batch_size % self.micro_batch_size:
            raise ValueError("global_batch_size must be a multiple of micro_batch_size")
        if self.num_query_groups is not None and (
            self.num_query_groups < 1 or self.num_attention_heads % self.num_query_groups
        ):
            raise ValueError("num_query_groups must be >= 1 and divide num_attention_heads")
        if self.ffn_hidden_size is not None and self.ffn_hidden_size < 1:
            raise ValueError("ffn_hidden_size must be >= 1")

    @property
    def kv_channels(self) -> int:
        """Width of all key (or value) heads together: ``(h / a) · groups`` (``h`` without GQA)."""
        groups = self.num_attention_heads if self.num_query_groups is None else self.num_query_groups
        return self.hidden_size // self.num_attention_heads * groups

    @property
    def ffn_size(self) -> int:
        return 4 * self.hidden_size if self.ffn_hidden_size is None else self.ffn_hidden_size

    def _layer_matmul_correction(self) -> int:
        """Multiply-adds per token per layer beyond the GPT-3 layer's ``12h²`` (exactly 0 for it).

        Keys and values project to ``kv_channels`` instead of ``h`` each; the MLP has ``2·h·f``
        weights (``3·h·f`` when gated) instead of ``8h²``.
        """
        h = self.hidden_size
        mlp = (3 if self.gated_mlp else 2) * h * self.ffn_size
        return 2 * h * (self.kv_channels - h) + mlp - 8 * h * h

    def flops_per_iteration(self, recompute: bool = False) -> float:
        """Model FLOPs of one iteration (forward + backward [+ recomputed forward]).

        Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
        Megatron-LM", SC'21, eq. (3): ``96·B·s·L·h²·(1 + s/(6h) + V/(16·L·h))`` with full activation
        recomputation (4 forward-equivalents per layer) and ``72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h))``
        without (3 forward-equivalents; the logit layer is never recomputed, hence 12 vs 16).
        Other layer shapes add ``2·B·s·L·Δ`` per forward-equivalent, Δ the extra multiply-adds per
        token of one layer (:meth:`_layer_matmul_correction`); untied embeddings and rotary
        positions change no matrix multiply.
        """
        b, s, layers, h, v = (
            self.global_batch_size,
            self.seq_length,
            self.num_layers,
            self.hidden_size,
            self.vocab_size,
        )
        extra = 2 * b * s * layers * self._layer_matmul_correction()
        if recompute:
            return 96.0 * b * s * layers * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * layers * h)) + float(
                4 * extra
            )
        return 72.0 * b * s * layers * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * layers * h)) + float(
            3 * extra
        )

    def parameter_count(self) -> float:
        """Parameters: ``12·L·h²·(1 + 13/(12h) + (V + s)/(12·L·h))`` (Narayanan et al., SC'21, §5.1).

        Corrections for other shapes: per layer, the key/value weights and biases
        (``2·(h + 1)·(kv - h)``) and the MLP (``2·h·f + f`` weights and biases, ``3·h·f + 2f``
        gated, instead of ``8h² + 4h``); ``V·h`` for an untied output layer; ``-s·h`` without a
        learned position table.
        """
        layers, h = self.num_layers, self.hidden_size
        f = self.ffn_size
        mlp = 3 * h * f + 2 * f if self.gated_mlp else 2 * h * f + f
        per_layer = 2 * (h + 1) * (self.kv_channels - h) + mlp - (8 * h * h + 4 * h)
        extra = layers * per_layer
        if self.untie_embeddings:
            extra += self.vocab_size * h
        if not self.learned_position_embeddings:
            extra -= self.seq_length * h
        return float(extra) + (
            12.0
            * layers
            * h
            * h
            * (1.0 + 13.0 / (12.0 * h) + (self.vocab_size + self.seq_length) / (12.0 * layers * h))
        )

    def model_state_bytes(self) -> float:
        """Weights + gradients + Adam state under mixed precision (16 bytes/parameter, ZeRO §3.1)."""
        return self.parameter_count() * BYTES_PER_PARAM_MIXED_ADAM

    def activation_bytes_per_layer(self, micro_batch: int, tp: int, recompute: bool) -> float:
        """Activation memory of one transformer layer for one in-flight micro-batch.

        Korthikanti et al. (MLSys'23) eq. (2) with tensor parallelism and no sequence parallelism:
        ``s·b·h·(10 + 24/t + 5·a·s/(h·t))`` bytes. With full recomputation only the layer input is
        kept: ``2·s·b·h`` bytes (their §4.3). Other shapes change the tensor-parallel terms: keys
        and values keep ``2·s·b·kv`` bytes each instead of ``2·s·b·h``; the MLP keeps its
        ``f``-wide input and output of the activation (``4·s·b·f``, ``6·s·b·f`` gated: both
        projections and their product) instead of ``16·s·b·h``.
        """
        s, h, a = self.seq_length, self.hidden_size, self.num_attention_heads
        if recompute:
            return float(BYTES_PER_ACTIVATION_ELEMENT * s * micro_batch * h)
        mlp = (6 if self.gated_mlp else 4) * self.ffn_size
        extra = s * micro_batch * (4 * (self.kv_channels - h) + mlp - 16 * h)
        return s * micro_batch * h * (10.0 + 24.0 / tp + 5.0 * a * s / (h * tp)) + extra / tp
