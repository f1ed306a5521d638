"""What a transition's steps carry (``TransitionStep.detail``), typed: validated when written and when read
back, so a step row never holds a shape its readers do not expect.

- a command step (``stop``, ``start``, ``reconfigure``, ``retry``): the ids of its commands (the step is
  done when every one is acked) and, for a reconfiguration, the surviving ranks ``(old, new)``;
- the ``resume`` step: the ranks of the new epoch, what each reported so far (its first and last
  iteration, its ``TransitionReport``) and the planned rollback in iterations.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class RankResumed(BaseModel):
    """One rank of the new epoch that made progress: the iterations it ran, and its transition report."""

    model_config = ConfigDict(extra="forbid")

    first_iteration: int
    last_iteration: int | None = None
    at: str | None = None
    """When it first reported (ISO 8601)."""
    report: dict[str, Any] | None = None
    """Its ``TransitionReport`` as sent (``phases_s`` among others)."""


class StepDetail(BaseModel):
    """``TransitionStep.detail``: the fields a step of its kind uses (the others keep their defaults)."""

    model_config = ConfigDict(extra="forbid")

    commands: list[str] = Field(default_factory=list)
    """Command ids of a command step."""
    survivors: list[tuple[int, int]] = Field(default_factory=list)
    """``(old rank, new rank)`` of the ranks that keep running through a reconfiguration."""
    ranks: list[int] = Field(default_factory=list)
    """The resume step's ranks: it is done when every one has reported."""
    reported: dict[int, RankResumed] = Field(default_factory=dict)
    planned_rollback: int | None = None
    """Iterations the chosen state sources roll back (the resume step)."""

    @classmethod
    def read(cls, raw: Any) -> StepDetail:
        """A stored detail (``{}`` and ``None`` are an empty one); a malformed one raises ``ValueError``."""
        return cls.model_validate(raw or {})

    def stored(self) -> dict[str, Any]:
        """The JSON to store: the fields this step set (a step's detail keeps its kind's shape)."""
        return self.model_dump(mode="json", exclude_unset=True)

    def missing_ranks(self) -> set[int]:
        return set(self.ranks) - set(self.reported)
