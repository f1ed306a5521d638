"""``make demo`` on a host with fewer cores than its 8 workers runs 4 agents x 1 device instead of x 2
(8 Megatron workers and 4 warm spares on 2 cores starved the control plane), and halves the tasks'
worker bounds so that all three still fit and the planner still chooses; the operator's --agents /
--devices-per-agent win, and a big host keeps the full demo."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from controlplane.config.demo import fit_demo_size
from controlplane.config.demo_scenario import DEMO_TASKS, TINY_GPT, demo_tasks
from controlplane.core.planning import (
    DEVICE_KINDS,
    Efficiency,
    GPTSpec,
    PlanningProblem,
    TaskState,
    build_throughput_table,
    plan,
)


def test_a_small_host_gets_one_device_per_agent_and_says_so() -> None:
    agents, per_agent, said = fit_demo_size(None, None, cores=2)
    assert (agents, per_agent) == (4, 1)
    assert len(said) == 1
    assert "4 workers" in said[0]
    assert "--devices-per-agent" in said[0]


def test_the_operators_numbers_and_a_big_host_are_left_alone() -> None:
    assert fit_demo_size(None, 2, cores=2) == (4, 2, [])
    assert fit_demo_size(3, None, cores=2) == (3, 2, [])
    assert fit_demo_size(None, None, cores=8) == (4, 2, [])


def test_the_full_demo_keeps_its_tasks() -> None:
    assert demo_tasks(8) == DEMO_TASKS


def _planned(tasks: tuple[dict[str, Any], ...], workers: int) -> dict[str, int]:
    spec = GPTSpec(**TINY_GPT)
    kind = replace(DEVICE_KINDS["cpu-slot"], devices_per_node=1)  # one device per agent
    states = tuple(
        TaskState(
            t["name"],
            t["weight"],
            build_throughput_table(spec, kind, t["max_workers"], Efficiency()),
            min_workers=t["min_workers"],
            max_workers=t["max_workers"],
        )
        for t in tasks
    )
    return plan(PlanningProblem(states, workers, 3600.0, unit_size=1)).new_counts


def test_on_four_workers_every_task_fits_and_the_planner_chooses() -> None:
    tasks = demo_tasks(4)
    assert [t["name"] for t in tasks] == [t["name"] for t in DEMO_TASKS]
    assert [t["weight"] for t in tasks] == [t["weight"] for t in DEMO_TASKS]
    assert sum(int(t["min_workers"]) for t in tasks) <= 3  # all three fit, even after a node loss
    assert sum(int(t["max_workers"]) for t in tasks) > 4  # more wanted than there is: a real choice
    for workers in (4, 3):
        counts = _planned(tasks, workers)
        assert sum(counts.values()) == workers
        assert counts["gpt-alpha"] == 2  # the heaviest task gets its maximum
