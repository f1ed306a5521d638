from controlplane.core.failures import MonitorParams
from controlplane.core.failures.evaluation import (
    SERIES_KINDS,
    evaluate_hang_detector,
    evaluate_straggler_detector,
    synthetic_series,
)


def test_marked_slow_phases_cause_no_false_positives_while_unmarked_checkpoints_do() -> None:
    for kind in ("steady-noisy", "drifting", "checkpoint-marked", "eval-marked", "heavy-tail"):
        ev = evaluate_hang_detector(synthetic_series(kind, n=600, base_s=4.0))
        assert ev.false_positives == 0, kind
    unmarked = evaluate_hang_detector(synthetic_series("checkpoint-unmarked", n=600, base_s=4.0))
    assert unmarked.false_positives == 6  # every 100th iteration is 8x > 3 x median


def test_injected_hangs_are_detected_within_the_design_target_plus_one_poll() -> None:
    for kind in SERIES_KINDS:
        s = synthetic_series(kind, n=400, base_s=1.0)
        ev = evaluate_hang_detector(s, hang_at=range(20, 400, 50), poll_s=0.05)
        assert ev.detected == ev.hangs, kind
        assert ev.max_delay_over_target is not None
        assert ev.max_delay_over_target <= 1.0 + 0.05 / 5.0 + 1e-9, kind


def test_a_hang_during_warm_up_is_left_to_the_collective_timeout() -> None:
    ev = evaluate_hang_detector(synthetic_series("steady-noisy", n=50), MonitorParams(), hang_at=[2])
    assert ev.detected == 0
    assert ev.miss_rate == 1.0


def test_straggler_evaluation_detects_a_clear_slowdown_and_raises_nothing_without_one() -> None:
    assert evaluate_straggler_detector("none", slowdown=1.0).false_verdicts == 0
    slow = evaluate_straggler_detector("2x", slowdown=2.0)
    assert slow.false_verdicts == 0
    assert slow.detected_after is not None
    assert slow.detected_after < 30
