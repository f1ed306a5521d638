"""Planning problems and plans as values other processes can share.

- :func:`problem_digest` — a stable name for a :class:`PlanningProblem`: equal problems get the same digest in
  every process (it is computed from the ``repr`` of each task, which holds every field that changes the
  answer, floats written exactly, and the problem's other fields; Python's hash randomisation plays no
  part). A task's part is kept per task: the plans of one refresh share all their tasks but one.
- :func:`plan_to_dict` / :func:`plan_from_dict` — a :class:`PlannedAllocation` as plain JSON data and back,
  equal to the original. A plan is a pure function of its problem, so a plan stored under a problem's digest
  is the answer for that problem in any process, for as long as it is kept.
"""

from __future__ import annotations

import hashlib
from dataclasses import fields
from functools import lru_cache
from typing import Any

from controlplane.core.planning.planner import PlannedAllocation, PlanningProblem, TaskAssignment, TaskState
from controlplane.core.planning.throughput import MegatronConfig

CODEC_VERSION = 2
"""Part of every digest: a change to the plan encoding, the digest or the planner's answer invalidates stored
plans."""


@lru_cache(maxsize=4096)
def _task_digest(task: TaskState) -> str:
    return hashlib.sha256(repr(task).encode()).hexdigest()


def problem_digest(problem: PlanningProblem) -> str:
    head = f"v{CODEC_VERSION}:{problem.capacity_units}:{problem.d_running_s!r}:{problem.unit_size}"
    return hashlib.sha256(":".join([head, *map(_task_digest, problem.tasks)]).encode()).hexdigest()


_CONFIG_FIELDS = tuple(f.name for f in fields(MegatronConfig))
_ASSIGNMENT_FIELDS = tuple(f.name for f in fields(TaskAssignment))
_PLAN_FIELDS = tuple(f.name for f in fields(PlannedAllocation))


def _shallow(obj: object, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in names}


def plan_to_dict(plan: PlannedAllocation) -> dict[str, Any]:
    """Field by field (``dataclasses.asdict`` deep-copies every value: 1.2 s for the ~130 plans of a refresh
    at 1,024 nodes)."""
    out = _shallow(plan, _PLAN_FIELDS)
    out["tasks"] = [
        {**_shallow(a, _ASSIGNMENT_FIELDS), "config": a.config and _shallow(a.config, _CONFIG_FIELDS)}
        for a in plan.tasks
    ]
    return out


def _assignment(data: dict[str, Any]) -> TaskAssignment:
    config = data["config"]
    return TaskAssignment(
        task_id=str(data["task_id"]),
        old_workers=int(data["old_workers"]),
        new_workers=int(data["new_workers"]),
        config=MegatronConfig(**config) if config is not None else None,
        waf=float(data["waf"]),
        gain=float(data["gain"]),
        transition_penalty=float(data["transition_penalty"]),
        marginal_waf_up=None if data["marginal_waf_up"] is None else float(data["marginal_waf_up"]),
        marginal_waf_down=None if data["marginal_waf_down"] is None else float(data["marginal_waf_down"]),
    )


def plan_from_dict(data: dict[str, Any]) -> PlannedAllocation:
    """The inverse of :func:`plan_to_dict`; raises ``KeyError``/``TypeError``/``ValueError`` on bad data."""
    return PlannedAllocation(
        method=str(data["method"]),
        tasks=tuple(_assignment(a) for a in data["tasks"]),
        objective=float(data["objective"]),
        expected_waf=float(data["expected_waf"]),
        transition_cost=float(data["transition_cost"]),
        moved_workers=int(data["moved_workers"]),
        capacity_units=int(data["capacity_units"]),
        unit_size=int(data["unit_size"]),
        d_running_s=float(data["d_running_s"]),
        compute_time_s=float(data["compute_time_s"]),
        reserved_workers=int(data["reserved_workers"]),
    )
