"""Transitions (docs/ARCHITECTURE.md §7.6): where each rank of a new epoch takes its state from, and what it
costs.

Pure: no Django, no torch. ``migration`` chooses state sources by the nearest principle;
``snapshots`` turns agents' snapshot reports into the complete copies it chooses from; ``deadlines``
scales a step's deadline with the task's measured iteration time; ``steps`` types what a transition step
carries.
"""

from controlplane.core.transitions.deadlines import step_deadline_s
from controlplane.core.transitions.migration import (
    SOURCE_ORDER,
    LiveShard,
    MigrationPlan,
    NewRank,
    SnapshotCopy,
    choose_state_sources,
)
from controlplane.core.transitions.snapshots import complete_snapshot_copies, megatron_shard_of
from controlplane.core.transitions.steps import RankResumed, StepDetail

__all__ = [
    "SOURCE_ORDER",
    "LiveShard",
    "MigrationPlan",
    "NewRank",
    "RankResumed",
    "SnapshotCopy",
    "StepDetail",
    "choose_state_sources",
    "complete_snapshot_copies",
    "megatron_shard_of",
    "step_deadline_s",
]
