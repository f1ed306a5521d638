"""A transition step's deadline is its floor, or k iterations of the task's recent median iteration time
when longer (a slow host makes process starts and first iterations slow too), at most a factor of the
floor; a task that never ran gets the floor."""

from __future__ import annotations

import pytest

from controlplane.core.transitions import step_deadline_s


def test_a_fast_task_and_a_task_never_measured_get_the_floor() -> None:
    assert step_deadline_s(60.0, 0.1, iterations=200) == 60.0
    assert step_deadline_s(60.0, None, iterations=200) == 60.0


def test_a_slow_task_gets_k_iterations() -> None:
    assert step_deadline_s(60.0, 0.9, iterations=200) == pytest.approx(180.0)
    assert step_deadline_s(180.0, 0.9, iterations=600) == pytest.approx(540.0)


def test_the_deadline_never_exceeds_the_factor_times_the_floor() -> None:
    assert step_deadline_s(60.0, 30.0, iterations=200, max_factor=5.0) == 300.0
    assert step_deadline_s(60.0, 30.0, iterations=200, max_factor=1.0) == 60.0


def test_nonsense_is_refused() -> None:
    with pytest.raises(ValueError, match="floor_s"):
        step_deadline_s(0.0, 1.0, iterations=200)
