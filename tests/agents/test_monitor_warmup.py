"""The agent's hang monitor: the design's threshold after warm-up, a fixed timeout before it."""

from __future__ import annotations

from agents.monitor import MonitorConfig, RankMonitor


def test_no_threshold_during_warmup_means_the_warmup_timeout_applies() -> None:
    m = RankMonitor(MonitorConfig(hang_floor_s=4.5, warmup_timeout_s=60))
    assert m.threshold_s() == 60
    assert m.check(59, "train") is None
    hang = m.check(61, "train")
    assert hang is not None
    assert hang.threshold_s == 60


def test_after_warmup_threshold_is_max_of_factor_times_median_and_floor() -> None:
    m = RankMonitor(MonitorConfig(hang_floor_s=4.5))
    for _ in range(20):
        m.observe(0.05, "train")
    assert m.threshold_s() == 4.5
    assert m.check(4.4, "train") is None
    assert m.check(4.6, "train") is not None
    for _ in range(60):
        m.observe(2.0, "train")
    assert m.threshold_s() == 6.0


def test_marked_slow_phases_are_not_hangs() -> None:
    m = RankMonitor(MonitorConfig(hang_floor_s=1.0, slow_phase_timeout_s=100))
    for _ in range(20):
        m.observe(0.05, "train")
    m.observe(30.0, "checkpoint")
    assert m.threshold_s() == 1.0
    assert m.check(50, "checkpoint") is None
    assert m.check(50, "first") is None
    assert m.check(101, "checkpoint") is not None
