"""Orchestration core: pure decisions the coordinator's workload manager and failure handling take.

- ``placement``: worker counts -> concrete devices and Megatron ranks (:func:`place`,
  :func:`rank_coordinates`).
- ``correlation``: which of a task's failure events to act on, and with what severity
  (:func:`correlate`).
"""

from controlplane.core.orchestration.correlation import (
    SEVERITY_RANK,
    CorrelatedAction,
    FailureCandidate,
    correlate,
    recovery_action_for,
)
from controlplane.core.orchestration.placement import (
    DeviceSlot,
    Layout,
    PlacementError,
    RankPlacement,
    place,
    rank_coordinates,
    survivors,
)

__all__ = [
    "SEVERITY_RANK",
    "CorrelatedAction",
    "DeviceSlot",
    "FailureCandidate",
    "Layout",
    "PlacementError",
    "RankPlacement",
    "correlate",
    "place",
    "rank_coordinates",
    "recovery_action_for",
    "survivors",
]
