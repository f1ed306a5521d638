import pytest

from controlplane.core.planning import GPTSpec

GPT3_175B = GPTSpec(96, 12288, 96, 2048, 51200, 1536, 1)


def test_gpt3_175b_has_about_175_billion_parameters() -> None:
    assert GPT3_175B.parameter_count() == pytest.approx(174.6e9, rel=0.01)


def test_flops_per_iteration_matches_the_closed_form_with_and_without_recompute() -> None:
    b, s, layers, h, v = 1536, 2048, 96, 12288, 51200
    assert GPT3_175B.flops_per_iteration(False) == pytest.approx(
        72 * b * s * layers * h**2 * (1 + s / (6 * h) + v / (12 * layers * h))
    )
    assert GPT3_175B.flops_per_iteration(True) == pytest.approx(
        96 * b * s * layers * h**2 * (1 + s / (6 * h) + v / (16 * layers * h))
    )
    # Recomputation adds one forward pass: 4/3 of the layer FLOPs (slightly less overall).
    ratio = GPT3_175B.flops_per_iteration(True) / GPT3_175B.flops_per_iteration(False)
    assert 1.3 < ratio < 4 / 3


def test_invalid_specs_are_rejected() -> None:
    with pytest.raises(ValueError, match="divisible"):
        GPTSpec(2, 100, 3, 16, 10, 4, 1)
    with pytest.raises(ValueError, match="multiple"):
        GPTSpec(2, 64, 4, 16, 10, 6, 4)
