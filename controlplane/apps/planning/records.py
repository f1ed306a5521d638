"""What a ``Plan`` row stores per task (``Plan.decisions``), typed: validated when the plan is recorded and
when a decision is read back (the epochs' layouts of
:func:`~controlplane.apps.planning.sources.epoch_layouts`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ConfigRecord(BaseModel):
    """A task's Megatron configuration as stored (``TrainingTask.parallel_config`` has the same shape)."""

    model_config = ConfigDict(extra="forbid")

    tp: int = Field(ge=1)
    pp: int = Field(ge=1)
    dp: int = Field(ge=1)
    micro_batch: int | None = Field(default=None, ge=1)
    num_micro_batches: int | None = Field(default=None, ge=1)
    recompute: bool | None = None


class TaskDecision(BaseModel):
    """One task's row of a plan: its worker count and configuration before and after, and what the planner
    valued it at (absent for an in-place recovery, which keeps both)."""

    model_config = ConfigDict(extra="forbid")

    task: int
    name: str = ""
    old_workers: int = Field(ge=0)
    new_workers: int = Field(ge=0)
    old_config: ConfigRecord | None = None
    new_config: ConfigRecord | None = None
    waf: float | None = None
    gain: float | None = None
    transition_penalty: float | None = None

    def stored(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


def config_record(raw: Any) -> ConfigRecord | None:
    """A stored configuration (``{}`` and ``None``: none)."""
    return ConfigRecord.model_validate(raw) if raw else None


def read_decisions(raw: Iterable[Any] | None) -> list[TaskDecision]:
    """A plan's stored decisions; a malformed one raises ``ValueError``."""
    return [TaskDecision.model_validate(d) for d in raw or []]
