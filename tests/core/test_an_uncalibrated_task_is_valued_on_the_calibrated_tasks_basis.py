"""The prior an uncalibrated task is planned with: the model's factors slowed by the median measured /
modelled ratio of the calibrated tasks (never faster than the model), the model itself when none is
calibrated."""

from __future__ import annotations

import pytest

from controlplane.core.planning import (
    DEVICE_KINDS,
    Efficiency,
    GPTSpec,
    Measurement,
    MegatronConfig,
    iteration_time_breakdown,
    measured_slowdown,
    uncalibrated_prior,
)

SPEC = GPTSpec(
    num_layers=4,
    hidden_size=256,
    num_attention_heads=8,
    seq_length=512,
    vocab_size=32000,
    global_batch_size=32,
    micro_batch_size=4,
)
KIND = DEVICE_KINDS["h100-80g"]
CONFIG = MegatronConfig(1, 1, 4, 4, 2, False)


def test_the_slowdown_is_the_median_measured_over_modelled_ratio() -> None:
    modelled = iteration_time_breakdown(SPEC, KIND, CONFIG).total(Efficiency())
    ms = [Measurement(CONFIG, r * modelled) for r in (90.0, 110.0, 100.0)]
    assert measured_slowdown(SPEC, KIND, ms) == pytest.approx(100.0)
    assert measured_slowdown(SPEC, KIND, []) is None


def test_the_prior_slows_the_model_by_the_median_and_never_speeds_it_up() -> None:
    base = Efficiency()
    assert uncalibrated_prior([]) == base
    slow = uncalibrated_prior([50.0, 100.0, 200.0])
    assert slow.compute == pytest.approx(base.compute / 100.0)
    assert slow.communication == pytest.approx(base.communication / 100.0)
    modelled = iteration_time_breakdown(SPEC, KIND, CONFIG)
    assert modelled.total(slow) == pytest.approx(100.0 * modelled.total(base))
    assert uncalibrated_prior([0.5, 0.25]) == base
