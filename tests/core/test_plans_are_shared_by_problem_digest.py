"""Plans travel between processes: a plan survives its JSON encoding unchanged, equal problems get the same
digest in every process (whatever its hash seed), and problems that differ in anything the planner reads get
different digests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings

from controlplane.core.planning import PlanningProblem, plan
from controlplane.core.planning.codec import plan_from_dict, plan_to_dict, problem_digest
from tests.core.planning_strategies import problems

ROOT = Path(__file__).resolve().parents[2]


@settings(max_examples=60, deadline=None)
@given(problems())
def test_a_plan_survives_its_json_encoding(problem: PlanningProblem) -> None:
    answer = plan(problem)
    assert plan_from_dict(json.loads(json.dumps(plan_to_dict(answer)))) == answer


@settings(max_examples=60, deadline=None)
@given(problems())
def test_problems_that_differ_get_different_digests(problem: PlanningProblem) -> None:
    digest = problem_digest(problem)
    assert problem_digest(replace(problem)) == digest
    assert problem_digest(replace(problem, capacity_units=problem.capacity_units + 1)) != digest
    assert problem_digest(replace(problem, d_running_s=problem.d_running_s * 2 + 1)) != digest
    first = problem.tasks[0]
    changed = (replace(first, weight=first.weight + 0.5), *problem.tasks[1:])
    assert problem_digest(replace(problem, tasks=changed)) != digest
    changed = (replace(first, hit=not first.hit), *problem.tasks[1:])
    assert problem_digest(replace(problem, tasks=changed)) != digest
    assert problem_digest(replace(problem, tasks=problem.tasks[1:])) != digest


DIGEST_IN_A_CHILD = """
import json, sys
from controlplane.core.planning import PlanningProblem, TaskState, ThroughputTable, TransitionModel
from controlplane.core.planning.codec import problem_digest
tasks = tuple(
    TaskState(f"t{i}", 1.0 + i / 3, ThroughputTable.from_points({1: 1.5e12, 2: 2.9e12, 4: 5.1e12}),
              workers=i, transition=TransitionModel(state_bytes=3.3e9))
    for i in range(3)
)
print(problem_digest(PlanningProblem(tasks, 4, 3600.0, unit_size=1)))
"""


def test_equal_problems_get_one_digest_in_every_process() -> None:
    digests = set()
    for seed in ("1", "2", "random"):
        out = subprocess.run(
            [sys.executable, "-c", DIGEST_IN_A_CHILD],
            cwd=ROOT,
            env=dict(os.environ, PYTHONHASHSEED="0" if seed == "random" else seed),
            capture_output=True,
            text=True,
            check=True,
        )
        digests.add(out.stdout.strip())
    assert len(digests) == 1, digests
