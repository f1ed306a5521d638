import random

import pytest

from controlplane.core.planning import (
    Efficiency,
    GPTSpec,
    Measurement,
    calibrate,
    enumerate_configs,
    get_device_kind,
    iteration_time,
)

SPEC = GPTSpec(4, 128, 4, 128, 1000, 32, 4)
KIND = get_device_kind("cpu-slot")


def _configs():  # type: ignore[no-untyped-def]
    return [c for x in (1, 2, 4, 8) for c in enumerate_configs(SPEC, KIND, x) if c.micro_batch == 4]


def test_calibration_recovers_known_efficiencies_from_exact_measurements() -> None:
    truth = Efficiency(compute=0.12, communication=0.3, overhead_s=0.02)
    ms = [Measurement(c, iteration_time(SPEC, KIND, c, truth)) for c in _configs()]
    res = calibrate(SPEC, KIND, ms)
    assert res.rms_relative_error_after < 1e-9
    assert res.rms_relative_error_before > 0.1
    assert res.efficiency.compute == pytest.approx(0.12, rel=1e-6)
    assert res.efficiency.communication == pytest.approx(0.3, rel=1e-6)
    assert res.efficiency.overhead_s == pytest.approx(0.02, abs=1e-9)


def test_calibration_reduces_error_on_noisy_measurements_and_reports_it() -> None:
    rng = random.Random(7)
    truth = Efficiency(compute=0.2, communication=0.5, overhead_s=0.01)
    ms = [Measurement(c, iteration_time(SPEC, KIND, c, truth) * rng.uniform(0.95, 1.05)) for c in _configs()]
    res = calibrate(SPEC, KIND, ms)
    assert res.rms_relative_error_after < res.rms_relative_error_before
    assert res.max_relative_error_after < 0.08
    assert res.efficiency.compute == pytest.approx(0.2, rel=0.1)


def test_one_measurement_fits_one_factor_and_no_measurement_keeps_the_prior() -> None:
    c = _configs()[0]
    res = calibrate(SPEC, KIND, [Measurement(c, 1.0)])
    assert len(res.fitted) == 1
    assert iteration_time(SPEC, KIND, c, res.efficiency) == pytest.approx(1.0)
    assert calibrate(SPEC, KIND, []).efficiency == Efficiency()
