"""A plan's per-task decisions are typed: a row with an unknown field or a negative worker count is refused
when the plan is recorded, and nothing is stored; a valid row is stored with only the fields it set."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from controlplane.apps.planning.choices import PlanTrigger
from controlplane.apps.planning.models import Plan
from controlplane.apps.planning.records import TaskDecision, read_decisions
from controlplane.apps.planning.services import PlanRecord, do_record_plan


def record(decisions: list[TaskDecision | dict[str, Any]]) -> Plan:
    return do_record_plan(PlanRecord(PlanTrigger.MANUAL, {}, decisions, 0.0, 0.0, 0.0, 0.0))


def test_a_malformed_decision_is_refused_and_nothing_is_stored(db: None) -> None:
    with pytest.raises(ValidationError, match="workers"):
        record([{"task": 1, "old_workers": 0, "new_workers": 4, "workers": 4}])
    with pytest.raises(ValidationError, match="new_workers"):
        record([{"task": 1, "old_workers": 0, "new_workers": -1}])
    with pytest.raises(ValidationError, match="tp"):
        record([{"task": 1, "old_workers": 0, "new_workers": 4, "new_config": {"pp": 1, "dp": 4}}])
    assert not Plan.objects.exists()


def test_a_valid_decision_reads_back_typed(db: None) -> None:
    plan = record(
        [TaskDecision(task=1, old_workers=0, new_workers=4, new_config={"tp": 1, "pp": 1, "dp": 4})]
    )
    plan.refresh_from_db()
    assert plan.decisions == [
        {"task": 1, "old_workers": 0, "new_workers": 4, "new_config": {"tp": 1, "pp": 1, "dp": 4}}
    ]
    (d,) = read_decisions(plan.decisions)
    assert d.new_config is not None
    assert (d.new_config.tp, d.new_config.pp, d.new_config.dp) == (1, 1, 4)
