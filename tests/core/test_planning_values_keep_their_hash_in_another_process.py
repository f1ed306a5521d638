"""Tasks, problems and throughput tables cache their hash (they key the precomputed plans). The hash of a
string differs from process to process, so one that travels to another process (pickled) is rebuilt there,
never carried: it then finds the plans keyed by an equal problem built in that process."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

from controlplane.core.planning import PlanningProblem, TaskState, ThroughputTable, TransitionModel

ROOT = Path(__file__).resolve().parents[2]

BUILD = """
from controlplane.core.planning import PlanningProblem, TaskState, ThroughputTable, TransitionModel
table = ThroughputTable.from_points({8: 8.0, 16: 15.0})
problem = PlanningProblem(
    tuple(TaskState(f"t{i}", 1.0 + i, table, workers=8 * i, transition=TransitionModel(state_bytes=1e9))
          for i in range(3)),
    5, 3600.0,
)
"""


def test_a_pickled_problem_hashes_as_one_built_in_the_process_that_loads_it() -> None:
    scope: dict[str, object] = {}
    exec(BUILD, scope)  # the same source builds the problem here and in the child
    problem = scope["problem"]
    assert isinstance(problem, PlanningProblem)
    blob = pickle.dumps(problem).hex()
    check = (
        BUILD
        + f"""
import pickle
got = pickle.loads(bytes.fromhex("{blob}"))
plans = {{problem: "plan"}}
print(plans.get(got), hash(got.tasks[0]) == hash(problem.tasks[0]),
      hash(got.tasks[0].table) == hash(problem.tasks[0].table))
"""
    )
    seed = "11" if os.environ.get("PYTHONHASHSEED") != "11" else "12"
    out = subprocess.run(
        [sys.executable, "-c", check],
        env={**os.environ, "PYTHONHASHSEED": seed},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["plan", "True", "True"]


def test_a_pickled_value_equals_and_hashes_as_the_original_here() -> None:
    table = ThroughputTable.from_points({1: 1.0, 2: 1.9})
    task = TaskState("a", 2.0, table, workers=2, reserved=1, transition=TransitionModel(state_bytes=5.0))
    problem = PlanningProblem((task,), 3, 60.0, unit_size=1)
    for value in (table, task, problem):
        again = pickle.loads(pickle.dumps(value))
        assert again == value
        assert hash(again) == hash(value)
