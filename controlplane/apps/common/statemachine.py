"""State machines as data: one table of allowed transitions, terminal states that are never left.

Pure Python on purpose (no Django): the tables are also property-tested on their own. States are
strings (Django ``TextChoices`` members are ``str``), so rows read back from the database compare
equal to the enum members.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from controlplane.apps.common.errors import InvalidTransition


@dataclass(frozen=True)
class StateMachine:
    name: str
    transitions: Mapping[str, frozenset[str]]
    terminal: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        for state in self.terminal:
            if self.transitions.get(state):
                raise ValueError(f"{self.name}: terminal state {state} has outgoing transitions")
        targets: set[str] = set().union(*self.transitions.values())
        unknown = targets - set(self.transitions)
        if unknown:
            raise ValueError(f"{self.name}: states {sorted(unknown)} are targets but not in the table")

    @property
    def states(self) -> frozenset[str]:
        return frozenset(self.transitions)

    def is_terminal(self, state: str) -> bool:
        return state in self.terminal

    def can(self, old: str, new: str) -> bool:
        return new in self.transitions.get(old, frozenset())

    def check(self, old: str, new: str) -> None:
        if not self.can(old, new):
            raise InvalidTransition(f"{self.name} cannot go from {old} to {new}")
