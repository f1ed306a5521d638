import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.core.failures import IterationTimeMonitor, MonitorParams


def _warm(mon: IterationTimeMonitor, durations: list[float]) -> None:
    for d in durations:
        mon.observe(d)


def test_no_threshold_and_no_verdict_during_warm_up() -> None:
    mon = IterationTimeMonitor(MonitorParams(warmup_iterations=3, min_samples=5))
    _warm(mon, [1.0] * 7)  # 3 discarded + 4 samples < 5
    assert mon.hang_threshold_s() is None
    assert mon.check(1e6) is None
    mon.observe(1.0)
    assert mon.hang_threshold_s() is not None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.01, 100.0), min_size=10, max_size=80))
def test_threshold_is_at_least_three_medians_and_the_floor(durations: list[float]) -> None:
    mon = IterationTimeMonitor()
    _warm(mon, durations)
    thr = mon.hang_threshold_s()
    med = mon.median_s()
    assert thr is not None
    assert med is not None
    assert thr >= 3.0 * med
    assert thr >= 5.0
    assert mon.check(thr) is None
    verdict = mon.check(thr + 1e-6)
    assert verdict is not None
    assert verdict.threshold_s == thr


def test_threshold_factor_floor_and_mad_are_parameters() -> None:
    mon = IterationTimeMonitor(MonitorParams(warmup_iterations=0, hang_factor=2.0, hang_floor_s=0.5))
    _warm(mon, [1.0, 1.0, 1.0, 1.0, 1.0])
    assert mon.hang_threshold_s() == pytest.approx(2.0)
    noisy = IterationTimeMonitor(MonitorParams(warmup_iterations=0, hang_floor_s=0.0, mad_factor=50.0))
    _warm(noisy, [1.0, 1.2, 0.8, 1.1, 0.9])
    thr = noisy.hang_threshold_s()
    assert thr is not None
    assert thr > 3.0 * 1.0


def test_slow_phases_are_excluded_from_the_statistics_and_judged_by_their_own_timeout() -> None:
    mon = IterationTimeMonitor(MonitorParams(warmup_iterations=0, excluded_phase_timeout_s=600.0))
    for i in range(40):
        mon.observe(100.0 if i % 10 == 9 else 2.0, "checkpoint" if i % 10 == 9 else "train")
    assert mon.median_s() == 2.0
    assert mon.check(100.0, "checkpoint") is None
    assert mon.check(601.0, "checkpoint") is not None
    assert mon.check(7.0, "train") is not None


def test_the_median_follows_a_drift_within_its_window() -> None:
    mon = IterationTimeMonitor(MonitorParams(window=20))
    _warm(mon, [1.0] * 30 + [4.0] * 30)
    assert mon.median_s() == 4.0
    assert mon.check(10.0) is None
