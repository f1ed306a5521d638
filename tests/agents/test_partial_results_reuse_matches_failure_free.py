"""Partial-result reuse (docs/ARCHITECTURE.md §7.6) with real Megatron workers: a DP replica killed
mid-iteration
costs only its own micro-batches, and the parameters equal the failure-free run's.

DP2 (4 micro-batches of the global batch, 2 per replica) under a real agent. Replica 1 is killed
either at the start of iteration K (before the gradient all-reduce: the survivor has finished its
2 micro-batches) or right after the all-reduce of iteration K (the survivor finishes step K, then its
all-reduce of K+1 fails). The coordinator's part is played by the test: on the survivor's exception it
sends a ``ReconfigureCommand`` to DP1 with the survivor listed. The survivor keeps its process,
model, optimizer and gradient buffer, computes the 2 lost micro-batches on top and steps.

Exactness: the kept and the recomputed sums are added the way a two-replica all-reduce adds them,
so the interrupted iteration's parameters are **bitwise** equal to the failure-free run's; later
iterations run at DP1 (one replica sums all 4 micro-batches in sequence, a different summation
order), so they are compared with a relative tolerance of 1e-5 of the largest parameter.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agents.testing import TaskDriver, TestCoordinator, load_state, spawn_agent, stop_agent
from agents.training.bench_knobs import ENV_STATE_DUMP
from agents.training.faults import AFTER_ALL_REDUCE
from controlplane.core.protocol import FaultSpec, ParallelConfig, TransitionReport
from tests.agents.helpers import launch

pytestmark = pytest.mark.slow

K = 3
ITERATIONS = 6


def _params(dump: Path, it: int, rank: int = 0) -> dict[str, torch.Tensor]:
    return load_state(dump, it, rank)["params"]  # type: ignore[no-any-return]


def _max_rel_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    scale = max(float(t.abs().max()) for t in a.values())
    return max(float((a[k] - b[k]).abs().max()) for k in a) / scale


def _bitwise(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


async def _run(c: TestCoordinator, tmp: Path, name: str, fault: FaultSpec | None) -> tuple[Path, TaskDriver]:
    dump = tmp / name / "dump"
    dump.mkdir(parents=True)
    agent = await spawn_agent(
        c.url, name, 2, tmp / name / "agent", hang_floor=2.0, extra_env={ENV_STATE_DUMP: str(dump)}
    )
    d = TaskDriver(c, task_id=name)
    try:
        await c.wait_for(lambda: c.messages("hello", name), 30)
        await d.start(name, 1, launch(dp=2, iterations=ITERATIONS))
        if fault is None:
            await d.wait_events("exited", 2)
            return dump, d
        await d.inject(name, 1, fault)
        (exc,) = await d.wait_events("exception", 1)
        assert (exc.rank, exc.epoch) == (0, 1)
        await d.reconfigure(
            name,
            2,
            launch(dp=1, iterations=ITERATIONS),
            previous_epoch=1,
            previous_parallel=ParallelConfig(dp=2),
            survivors={0: 0},
        )
        await d.wait_events("exited", 1, epoch=2)
        return dump, d
    finally:
        await stop_agent(agent)
        await agent.wait()


def _transition(d: TaskDriver) -> TransitionReport:
    (rep,) = [r.event for _, r in d.events("transition")]
    assert isinstance(rep, TransitionReport)
    return rep


async def test_a_replica_lost_before_or_after_the_all_reduce_costs_only_its_micro_batches(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    free, _ = await _run(coordinator, tmp_path, "free", None)
    before, d_before = await _run(
        coordinator, tmp_path, "before", FaultSpec(kind="crash", rank=1, at_iteration=K)
    )
    after, d_after = await _run(
        coordinator,
        tmp_path,
        "after",
        FaultSpec(kind="crash", rank=1, at_iteration=K, message=AFTER_ALL_REDUCE),
    )

    # Killed before the all-reduce of K: iteration K is finished in place with the 2 kept and the
    # 2 lost micro-batches (lost work = the failed replica's micro-batches, no rollback).
    rep = _transition(d_before)
    assert (rep.iteration, rep.in_place, rep.source, rep.from_epoch) == (K, True, "local_device", 1)
    assert (rep.reused_micro_batches, rep.recomputed_micro_batches, rep.rolled_back_iterations) == (2, 2, 0)
    assert rep.bytes_moved == 0
    # a survivor: no process start; its data stays open across the epochs (a phase of ~0 s)
    assert set(rep.phases_s) == {
        "teardown",
        "data",
        "rendezvous",
        "build",
        "migrate",
        "recompute",
        "first_iteration",
    }
    for it in range(K):
        assert _bitwise(_params(before, it), _params(free, it))
    assert _bitwise(_params(before, K), _params(free, K))
    for it in range(K + 1, ITERATIONS):
        assert _max_rel_diff(_params(before, it), _params(free, it)) <= 1e-5

    # Killed after the all-reduce of K: the survivor finished step K (bitwise the failure-free
    # step), then lost only the dead replica's share of K+1.
    rep = _transition(d_after)
    assert (rep.iteration, rep.in_place, rep.reused_micro_batches, rep.recomputed_micro_batches) == (
        K + 1,
        True,
        2,
        2,
    )
    assert rep.rolled_back_iterations == 0
    assert _bitwise(_params(after, K), _params(free, K))
    assert _bitwise(_params(after, K + 1), _params(free, K + 1))
    for it in range(K + 2, ITERATIONS):
        assert _max_rel_diff(_params(after, it), _params(free, it)) <= 1e-5
    # the failed replica's process is gone; the survivor kept its process (no new start)
    started = [r for _, r in d_after.events("started")]
    assert [(r.epoch, r.rank) for r in started] == [(1, 0), (1, 1)]
