"""GPT task specification and its FLOP / parameter / memory arithmetic.

API: :class:`GPTSpec` (frozen) with :meth:`GPTSpec.flops_per_iteration` (Narayanan et al., SC'21,
eq. 3), :meth:`GPTSpec.parameter_count`, :meth:`GPTSpec.model_state_bytes` and
:meth:`GPTSpec.activation_bytes_per_layer` (Korthikanti et al., "Reducing Activation Recomputation
in Large Transformer Models", MLSys'23, §4).
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

    def flops_per_iteration(self, recompute: bool = False) -> float:
        """Model FLOPs of one iteration (forward + backward [+ recomputed forward]).

        Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
        Megatron-LM", SC'21, eq. (3): ``96·B·s·L·h²·(1 + s/(6h) + V/(16·L·h))`` with full activation
        recomputation (4 forward-equivalents per layer) and ``72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h))``
        without (3 forward-equivalents; the logit layer is never recomputed, hence 12 vs 16).
        """
        b, s, layers, h, v = (
            self.global_batch_size,
            self.seq_length,
            self.num_layers,
            self.hidden_size,
            self.vocab_size,
        )
        if recompute:
            return 96.0 * b * s * layers * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * layers * h))
        return 72.0 * b * s * layers * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * layers * h))

    def parameter_count(self) -> float:
        """Parameters: ``12·L·h²·(1 + 13/(12h) + (V + s)/(12·L·h))`` (Narayanan et al., SC'21, §5.1)."""
        layers, h = self.num_layers, self.hidden_size
        return (
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
        kept: ``2·s·b·h`` bytes (their §4.3).
        """
        s, h, a = self.seq_length, self.hidden_size, self.num_attention_heads
        if recompute:
            return float(BYTES_PER_ACTIVATION_ELEMENT * s * micro_batch * h)
        return s * micro_batch * h * (10.0 + 24.0 / tp + 5.0 * a * s / (h * tp))
