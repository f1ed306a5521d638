"""A transition step's detail is typed: what a step stores round-trips through its JSON with the shape its
kind uses, and a detail with an unknown field or a wrong type is refused, written or read."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from controlplane.core.transitions.steps import RankResumed, StepDetail


def test_a_resume_step_round_trips_through_its_stored_json() -> None:
    detail = StepDetail(ranks=[0, 1], reported={}, planned_rollback=3)
    stored = detail.stored()
    assert stored == {"ranks": [0, 1], "reported": {}, "planned_rollback": 3}
    back = StepDetail.read(stored)
    assert back.missing_ranks() == {0, 1}
    back.reported = {**back.reported, 1: RankResumed(first_iteration=7, last_iteration=8)}
    again = StepDetail.read(back.stored())
    assert again.stored()["reported"] == {"1": {"first_iteration": 7, "last_iteration": 8}}
    assert again.missing_ranks() == {0}


def test_a_command_step_keeps_its_commands_and_survivors() -> None:
    stored = StepDetail(commands=["a", "b"], survivors=[(0, 1)]).stored()
    assert stored == {"commands": ["a", "b"], "survivors": [[0, 1]]}
    assert StepDetail.read(stored).survivors == [(0, 1)]
    assert StepDetail.read(None) == StepDetail()


def test_an_unknown_field_or_a_wrong_type_is_refused() -> None:
    with pytest.raises(ValidationError, match="stopped"):
        StepDetail.model_validate({"stopped": 8})
    with pytest.raises(ValidationError, match="ranks"):
        StepDetail(ranks=["zero"])  # type: ignore[list-item]
    with pytest.raises(ValidationError, match="first_iteration"):
        StepDetail.read({"ranks": [0], "reported": {"0": {"last_iteration": 3}}})
