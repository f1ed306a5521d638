"""Planning core (docs/ARCHITECTURE.md §7.3-7.5): throughput model, WAF, the DP planner, precomputed plans,
heuristics.

Pure Python (+ numpy for the DP's vectorised inner loop); no Django, Celery, Channels or torch.

- ``spec``: :class:`GPTSpec` (model + batch, FLOPs per iteration, parameters, memory).
- ``devices``: :class:`DeviceKind`, :data:`DEVICE_KINDS`, :func:`get_device_kind`.
- ``throughput``: :class:`MegatronConfig`, :class:`Efficiency`, :func:`enumerate_configs`,
  :func:`iteration_time`, :class:`ThroughputTable`, :func:`build_throughput_table`, :func:`calibrate`.
- ``waf``: :func:`waf` (F), :func:`gain` (G), :func:`expected_running_duration_s` (D_running),
  :class:`TransitionModel` (D_transition).
- ``planner``: :class:`TaskState`, :class:`PlanningProblem`, :class:`PlannedAllocation`, :func:`plan` (DP),
  :func:`brute_force_plan`.
- ``precompute``: :class:`ClusterState`, events, :func:`apply_event`, :class:`PrecomputedPlans`.
- ``split_dp``: :class:`SplitDP` — forward and backward DP tables of one problem, from which the plan of
  any one-task variant (each likely event's problem) is one DP step and one join.
- ``heuristics``: :func:`equal_split_plan`, :func:`weight_proportional_plan`,
  :func:`greedy_marginal_plan`.
"""

from controlplane.core.planning.devices import DEVICE_KINDS, DeviceKind, get_device_kind
from controlplane.core.planning.heuristics import (
    HEURISTICS,
    equal_split_plan,
    greedy_marginal_plan,
    weight_proportional_plan,
)
from controlplane.core.planning.planner import (
    Candidate,
    PlannedAllocation,
    PlanningProblem,
    TaskAssignment,
    TaskState,
    brute_force_plan,
    make_plan,
    plan,
    task_candidates,
)
from controlplane.core.planning.precompute import (
    ClusterState,
    NodeLost,
    NodeReturned,
    PlanEvent,
    PrecomputedPlans,
    TaskCompleted,
    apply_event,
)
from controlplane.core.planning.spec import GPTSpec
from controlplane.core.planning.split_dp import SplitDP, plan_variants
from controlplane.core.planning.throughput import (
    CalibrationResult,
    Efficiency,
    IterationTimeBreakdown,
    Measurement,
    MegatronConfig,
    ThroughputPoint,
    ThroughputTable,
    build_throughput_table,
    calibrate,
    enumerate_configs,
    fits_memory,
    iteration_time,
    iteration_time_breakdown,
    measured_slowdown,
    memory_per_device,
    uncalibrated_prior,
)
from controlplane.core.planning.waf import (
    TransitionModel,
    expected_running_duration_s,
    gain,
    mtbf_from_observations,
    waf,
)

__all__ = [
    "DEVICE_KINDS",
    "HEURISTICS",
    "CalibrationResult",
    "Candidate",
    "ClusterState",
    "DeviceKind",
    "Efficiency",
    "GPTSpec",
    "IterationTimeBreakdown",
    "Measurement",
    "MegatronConfig",
    "NodeLost",
    "NodeReturned",
    "PlanEvent",
    "PlannedAllocation",
    "PlanningProblem",
    "PrecomputedPlans",
    "SplitDP",
    "TaskAssignment",
    "TaskCompleted",
    "TaskState",
    "ThroughputPoint",
    "ThroughputTable",
    "TransitionModel",
    "apply_event",
    "brute_force_plan",
    "build_throughput_table",
    "calibrate",
    "enumerate_configs",
    "equal_split_plan",
    "expected_running_duration_s",
    "fits_memory",
    "gain",
    "get_device_kind",
    "greedy_marginal_plan",
    "iteration_time",
    "iteration_time_breakdown",
    "make_plan",
    "measured_slowdown",
    "memory_per_device",
    "mtbf_from_observations",
    "plan",
    "plan_variants",
    "task_candidates",
    "uncalibrated_prior",
    "waf",
    "weight_proportional_plan",
]
