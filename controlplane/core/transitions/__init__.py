"""Transitions (DESIGN §7): where each rank of a new epoch takes its state from, and what it costs.

Pure: no Django, no torch. ``migration`` chooses state sources by the nearest principle.
"""

from controlplane.core.transitions.migration import (
    SOURCE_ORDER,
    LiveShard,
    MigrationPlan,
    NewRank,
    SnapshotCopy,
    choose_state_sources,
)

__all__ = [
    "SOURCE_ORDER",
    "LiveShard",
    "MigrationPlan",
    "NewRank",
    "SnapshotCopy",
    "choose_state_sources",
]
