"""Failures core (docs/ARCHITECTURE.md §7.1-7.2): classification (evidence → severity → action) and detectors.

- ``classification``: :class:`Evidence`, :class:`Severity`, :class:`Action`, :class:`Classification`,
  :data:`RULES`, :func:`classify`, :func:`classify_evidence`, :func:`should_quarantine`,
  :func:`reclassify`.
- ``detectors``: :func:`heartbeat_expired`, :func:`mass_silence`, :class:`IterationTimeMonitor`,
  :class:`StragglerDetector`.
- ``evaluation``: synthetic iteration-time series and false-positive / detection-delay measurement.
"""

from controlplane.core.failures.classification import (
    DEFAULT_RULE,
    RULES,
    Action,
    Category,
    Classification,
    DetectorKind,
    EscalationPolicy,
    Evidence,
    FailureRecord,
    Rule,
    Severity,
    classify,
    classify_evidence,
    reclassify,
    should_quarantine,
)
from controlplane.core.failures.detectors import (
    HangVerdict,
    IterationTimeMonitor,
    MonitorParams,
    StragglerDetector,
    StragglerParams,
    StragglerVerdict,
    expired_nodes,
    heartbeat_deadline,
    heartbeat_expired,
    mass_silence,
)

__all__ = [
    "DEFAULT_RULE",
    "RULES",
    "Action",
    "Category",
    "Classification",
    "DetectorKind",
    "EscalationPolicy",
    "Evidence",
    "FailureRecord",
    "HangVerdict",
    "IterationTimeMonitor",
    "MonitorParams",
    "Rule",
    "Severity",
    "StragglerDetector",
    "StragglerParams",
    "StragglerVerdict",
    "classify",
    "classify_evidence",
    "expired_nodes",
    "heartbeat_deadline",
    "heartbeat_expired",
    "mass_silence",
    "reclassify",
    "should_quarantine",
]
