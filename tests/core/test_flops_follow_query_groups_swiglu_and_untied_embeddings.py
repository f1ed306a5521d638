"""FLOPs, parameters and activation memory of layer shapes beyond the GPT-3 layer.

Each figure is checked against a tally over the layer's matrices (independent of the closed form), and
a default spec's figures are checked bit for bit against the closed forms the planner has always used.
"""

from __future__ import annotations

import pytest

from controlplane.core.planning import GPTSpec


def _closed_form_flops(b: int, s: int, layers: int, h: int, v: int, recompute: bool) -> float:
    if recompute:
        return 96.0 * b * s * layers * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * layers * h))
    return 72.0 * b * s * layers * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * layers * h))


def _tally_flops(spec: GPTSpec, recompute: bool) -> int:
    """2 FLOPs per multiply-add, forward x3 (x4 recomputed) for layers, x3 for the logits."""
    h, s, heads = spec.hidden_size, spec.seq_length, spec.num_attention_heads
    groups = spec.num_query_groups or heads
    kv = h // heads * groups
    f = spec.ffn_hidden_size or 4 * h
    per_token = (
        h * h  # query projection
        + 2 * h * kv  # key and value projections
        + 2 * s * h  # scores and weighted values
        + h * h  # output projection
        + (3 if spec.gated_mlp else 2) * h * f  # MLP
    )
    tokens = spec.global_batch_size * s
    layers = 2 * tokens * spec.num_layers * per_token * (4 if recompute else 3)
    logits = 2 * tokens * h * spec.vocab_size * 3
    return layers + logits


def _tally_parameters(spec: GPTSpec) -> int:
    h, heads = spec.hidden_size, spec.num_attention_heads
    kv = h // heads * (spec.num_query_groups or heads)
    f = spec.ffn_hidden_size or 4 * h
    qkv = h * (h + 2 * kv) + (h + 2 * kv)
    proj = h * h + h
    mlp = (h * 2 * f + 2 * f if spec.gated_mlp else h * f + f) + f * h + h
    norms = 2 * 2 * h
    layer = qkv + proj + mlp + norms
    embeddings = spec.vocab_size * h * (2 if spec.untie_embeddings else 1)
    positions = spec.seq_length * h if spec.learned_position_embeddings else 0
    return spec.num_layers * layer + embeddings + positions


LLAMA_LIKE = GPTSpec(
    32,
    4096,
    32,
    4096,
    32000,
    1024,
    1,
    num_query_groups=8,
    ffn_hidden_size=11008,
    gated_mlp=True,
    untie_embeddings=True,
    learned_position_embeddings=False,
)


@pytest.mark.parametrize(
    "spec",
    [
        LLAMA_LIKE,
        GPTSpec(2, 64, 4, 32, 1024, 8, 2, num_query_groups=2),
        GPTSpec(2, 64, 4, 32, 1024, 8, 2, ffn_hidden_size=128, gated_mlp=True),
        GPTSpec(4, 256, 8, 128, 4096, 16, 4, untie_embeddings=True),
    ],
    ids=["llama-like", "gqa", "swiglu", "untied"],
)
@pytest.mark.parametrize("recompute", [False, True])
def test_flops_equal_a_tally_of_the_layer_matrices(spec: GPTSpec, recompute: bool) -> None:
    assert spec.flops_per_iteration(recompute) == pytest.approx(_tally_flops(spec, recompute), rel=1e-12)


@pytest.mark.parametrize(
    "spec",
    [
        LLAMA_LIKE,
        GPTSpec(2, 64, 4, 32, 1024, 8, 2, num_query_groups=1),
        GPTSpec(2, 64, 4, 32, 1024, 8, 2, ffn_hidden_size=128, gated_mlp=True),
        GPTSpec(4, 256, 8, 128, 4096, 16, 4, untie_embeddings=True),
        GPTSpec(4, 256, 8, 128, 4096, 16, 4),
    ],
    ids=["llama-like", "mqa", "swiglu", "untied", "gpt"],
)
def test_parameters_equal_a_tally_of_the_layer_matrices(spec: GPTSpec) -> None:
    # The closed form leaves out the final layer norm (2h).
    tally = _tally_parameters(spec)
    assert spec.parameter_count() == pytest.approx(tally, rel=1e-12)


def test_a_llama_7b_like_shape_has_about_6_7_billion_parameters() -> None:
    assert LLAMA_LIKE.num_query_groups == 8
    # 7B LLaMA has 6.74e9 with MHA; 8 KV groups remove 2·32·(4096·(4096 - 1024)) ≈ 0.81e9.
    assert LLAMA_LIKE.parameter_count() == pytest.approx(6.74e9 - 0.805e9, rel=0.01)


def test_default_specs_keep_the_closed_forms_bit_for_bit() -> None:
    for b, s, layers, h, a, v in [
        (1536, 2048, 96, 12288, 96, 51200),
        (8, 32, 2, 64, 4, 128),
        (7, 5, 3, 6, 2, 11),
    ]:
        spec = GPTSpec(layers, h, a, s, v, b, 1)
        for recompute in (False, True):
            assert spec.flops_per_iteration(recompute) == _closed_form_flops(b, s, layers, h, v, recompute)
        assert spec.parameter_count() == (
            12.0 * layers * h * h * (1.0 + 13.0 / (12.0 * h) + (v + s) / (12.0 * layers * h))
        )
        for tp in (1, 2, 3):
            assert spec.activation_bytes_per_layer(2, tp, False) == s * 2 * h * (
                10.0 + 24.0 / tp + 5.0 * a * s / (h * tp)
            )


def test_grouped_query_attention_and_a_narrower_mlp_keep_less_activation_memory() -> None:
    base = GPTSpec(2, 64, 4, 32, 1024, 8, 2)
    gqa = GPTSpec(2, 64, 4, 32, 1024, 8, 2, num_query_groups=1)
    s, b, h, kv = 32, 2, 64, 16
    assert base.activation_bytes_per_layer(b, 1, False) - gqa.activation_bytes_per_layer(
        b, 1, False
    ) == pytest.approx(4 * s * b * (h - kv))
    swiglu = GPTSpec(2, 64, 4, 32, 1024, 8, 2, ffn_hidden_size=128, gated_mlp=True)
    # 6·s·b·128 = 768 s·b against 16·s·b·64 = 1024 s·b, split over tp = 2.
    assert base.activation_bytes_per_layer(b, 2, False) - swiglu.activation_bytes_per_layer(
        b, 2, False
    ) == pytest.approx(s * b * (1024 - 768) / 2)


def test_query_groups_must_divide_the_heads() -> None:
    with pytest.raises(ValueError, match="num_query_groups"):
        GPTSpec(2, 64, 4, 32, 128, 8, 2, num_query_groups=3)
    with pytest.raises(ValueError, match="ffn_hidden_size"):
        GPTSpec(2, 64, 4, 32, 128, 8, 2, ffn_hidden_size=0)
