"""The stored severity and action of a failure event are the core's values: no table translates them."""

from controlplane.apps.incidents.choices import Action, Severity
from controlplane.core import failures


def test_every_core_action_is_a_stored_action_by_the_same_value() -> None:
    assert {a.value for a in failures.Action} | {"none"} == set(Action.values)
    for a in failures.Action:
        assert Action[a.name] == a.value


def test_every_core_severity_is_a_stored_severity_by_the_same_value() -> None:
    assert {s.value for s in failures.Severity} == set(Severity.values)
