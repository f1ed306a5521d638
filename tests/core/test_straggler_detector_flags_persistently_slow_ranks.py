from controlplane.core.failures import StragglerDetector, StragglerParams


def _run(det: StragglerDetector, iterations: int, slow: dict[int, float], ranks: int = 4) -> list[int]:
    flagged = []
    for i in range(iterations):
        for r in range(ranks):
            jitter = 1.0 + 0.01 * ((i * 7 + r * 3) % 5)
            v = det.observe(r, jitter * slow.get(r, 1.0))
            if v is not None:
                flagged.append(v.rank)
    return flagged


def test_a_rank_persistently_slower_than_its_peers_is_flagged_once() -> None:
    det = StragglerDetector(StragglerParams(ratio=1.25, persistence=3))
    assert _run(det, 60, {2: 1.6}) == [2]
    [v] = det.stragglers()
    assert v.rank == 2
    assert v.ratio > 1.25
    assert "rank 2" in v.reason


def test_equal_ranks_and_a_mildly_slow_rank_are_not_flagged() -> None:
    assert _run(StragglerDetector(), 60, {}) == []
    assert _run(StragglerDetector(StragglerParams(ratio=1.25)), 60, {1: 1.1}) == []


def test_one_slow_iteration_is_not_a_straggler() -> None:
    det = StragglerDetector()
    for i in range(40):
        for r in range(4):
            assert det.observe(r, 5.0 if (r == 0 and i == 20) else 1.0) is None


def test_a_recovered_rank_is_cleared() -> None:
    det = StragglerDetector(StragglerParams(window=5, persistence=2))
    _run(det, 30, {0: 2.0})
    assert [v.rank for v in det.stragglers()] == [0]
    _run(det, 30, {})
    assert det.stragglers() == []
