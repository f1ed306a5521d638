from controlplane.core.failures import readers_lag, reading_lag


def test_nothing_read_lately_is_no_lag() -> None:
    assert reading_lag([], cap_s=60.0) == 0.0


def test_a_link_reading_late_lags_by_its_delays() -> None:
    assert reading_lag([3.0] * 95 + [0.1] * 5, cap_s=60.0) == 3.0


def test_one_frame_that_waited_behind_a_pause_does_not_hold_every_verdict() -> None:
    assert reading_lag([0.01] * 99 + [12.0], cap_s=60.0) == 0.01


def test_the_lag_is_capped() -> None:
    assert reading_lag([500.0] * 10, cap_s=60.0) == 60.0


def test_the_process_that_lags_most_sets_the_lag() -> None:
    quick, behind = [0.01] * 950, [3.0] * 50
    assert reading_lag(quick + behind, cap_s=60.0) == 0.01  # together, its backlog is diluted
    assert readers_lag([quick, behind], cap_s=60.0) == 3.0
    assert readers_lag([], cap_s=60.0) == 0.0
