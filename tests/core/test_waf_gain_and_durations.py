import pytest

from controlplane.core.planning import (
    ThroughputTable,
    TransitionModel,
    expected_running_duration_s,
    gain,
    mtbf_from_observations,
    waf,
)

TABLE = ThroughputTable.from_points({8: 100.0, 16: 180.0})


def test_waf_is_weight_times_throughput_only_at_feasible_counts_within_bounds() -> None:
    assert waf(2.0, TABLE, 16) == 360.0
    assert waf(2.0, TABLE, 12) == 0.0
    assert waf(2.0, TABLE, 8, min_workers=16) == 0.0
    assert waf(2.0, TABLE, 16, max_workers=8) == 0.0


def test_d_running_is_mtbf_over_nodes_cut_short_by_known_changes() -> None:
    assert expected_running_duration_s(3600.0 * 100, 10) == pytest.approx(36000.0)
    assert expected_running_duration_s(3600.0 * 100, 10, change_etas_s=[600.0, 1200.0]) == 600.0
    assert expected_running_duration_s(3600.0 * 100, 10, cap_s=60.0) == 60.0
    assert mtbf_from_observations(4, 400.0) == 100.0
    assert mtbf_from_observations(0, 400.0) == 400.0


def test_transition_pulls_from_a_peer_when_a_replica_survives_and_rolls_back_otherwise() -> None:
    tm = TransitionModel(
        state_bytes=8e9, restart_s=10.0, peer_bandwidth=4e9, checkpoint_bandwidth=1e9, rollback_s=900
    )
    assert tm.duration_s(16, 8, hit=True, shard_ways=2) == pytest.approx(10.0 + 4e9 / 4e9)
    assert tm.duration_s(1, 8, hit=True, shard_ways=2) == pytest.approx(10.0 + 4e9 / 1e9 + 900)
    assert tm.duration_s(16, 0, hit=True) == 0.0


def test_gain_charges_the_current_waf_for_the_transition_only_on_change_or_hit() -> None:
    tm = TransitionModel(state_bytes=0.0, restart_s=10.0)
    kw = {"weight": 1.0, "table": TABLE, "d_running_s": 100.0, "transition": tm}
    assert gain(old_workers=8, new_workers=8, hit=False, **kw) == (100.0 * 100.0, 0.0)  # type: ignore[arg-type]
    g, pen = gain(old_workers=8, new_workers=8, hit=True, **kw)  # type: ignore[arg-type]
    assert pen == 100.0 * 10.0
    assert g == 100.0 * 100.0 - pen
    g, pen = gain(old_workers=8, new_workers=16, hit=False, **kw)  # type: ignore[arg-type]
    assert pen == 100.0 * 10.0
    assert g == 180.0 * 100.0 - pen
