import pytest

from controlplane.core.failures import mass_silence


def test_no_watched_nodes_is_no_mass_silence() -> None:
    assert not mass_silence(watched=0, silent=0)
    assert not mass_silence(watched=0, silent=0, min_nodes=1, fraction=1.0)


def test_exactly_at_the_fraction_is_a_mass_silence_and_just_below_is_not() -> None:
    assert mass_silence(watched=4, silent=2, min_nodes=2, fraction=0.5)
    assert mass_silence(watched=10, silent=3, min_nodes=3, fraction=0.3)  # no float rounding at 3/10
    assert not mass_silence(watched=7, silent=3, min_nodes=3, fraction=0.5)
    assert mass_silence(watched=6, silent=3)
    assert mass_silence(watched=5, silent=5, fraction=1.0)
    assert not mass_silence(watched=5, silent=4, fraction=1.0)


def test_below_min_nodes_is_never_a_mass_silence_however_large_the_share() -> None:
    assert not mass_silence(watched=2, silent=2)  # a 2-node cluster: every loss is handled as today
    assert not mass_silence(watched=1, silent=1)
    assert not mass_silence(watched=4, silent=2)  # half, but only two nodes
    assert mass_silence(watched=3, silent=3)
    assert not mass_silence(watched=8, silent=1, min_nodes=1)  # one of eight is a node, not the plane


def test_a_single_silent_node_in_a_large_cluster_is_not_a_mass_silence() -> None:
    assert not mass_silence(watched=100, silent=3)
    assert mass_silence(watched=100, silent=50)


@pytest.mark.parametrize(
    ("watched", "silent", "min_nodes", "fraction"),
    [(3, 4, 3, 0.5), (3, -1, 3, 0.5), (4, 4, 0, 0.5), (4, 4, 3, 0.0), (4, 4, 3, 1.5)],
)
def test_impossible_counts_and_parameters_are_refused(
    watched: int, silent: int, min_nodes: int, fraction: float
) -> None:
    with pytest.raises(ValueError):
        mass_silence(watched, silent, min_nodes=min_nodes, fraction=fraction)
