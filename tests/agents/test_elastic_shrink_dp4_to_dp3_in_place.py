"""Shrink in place, DP4 -> DP3, with real Megatron workers: a replica dies before the all-reduce, the
three survivors keep their processes and their 3 finished micro-batches each, compute one of the lost
replica's 3 each, and the step matches the failure-free DP4 step up to summation order. The global
batch stays 12 micro-batches (4 per replica at DP3 from then on).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agents.testing import TaskDriver, TestCoordinator, load_state, spawn_agent, stop_agent
from agents.training.bench_knobs import ENV_STATE_DUMP
from controlplane.core.protocol import FaultSpec, ParallelConfig, TransitionReport
from tests.agents.helpers import TINY, launch

pytestmark = pytest.mark.slow

MODEL = TINY.model_copy(update={"global_batch": 24})  # 12 micro-batches of 2
K = 2
ITERATIONS = 4


def _rel(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    scale = max(float(t.abs().max()) for t in b.values())
    return max(float((a[k] - b[k]).abs().max()) for k in b) / scale


async def _run(c: TestCoordinator, tmp: Path, node: str, crash: bool) -> tuple[Path, TaskDriver]:
    dump = tmp / node / "dump"
    dump.mkdir(parents=True)
    agent = await spawn_agent(
        c.url, node, 4, tmp / node, hang_floor=3.0, extra_env={ENV_STATE_DUMP: str(dump)}
    )
    d = TaskDriver(c, task_id=node)
    try:
        await c.wait_for(lambda: c.messages("hello", node), 30)
        await d.start(node, 1, launch(dp=4, iterations=ITERATIONS, model=MODEL))
        if not crash:
            await d.wait_events("exited", 4, timeout=180)
            return dump, d
        await d.inject(node, 1, FaultSpec(kind="crash", rank=3, at_iteration=K))
        await d.wait_events("exception", 3)
        ack = await d.reconfigure(
            node,
            2,
            launch(dp=3, iterations=ITERATIONS, model=MODEL),
            previous_epoch=1,
            previous_parallel=ParallelConfig(dp=4),
            survivors={0: 0, 1: 1, 2: 2},
        )
        assert "in place [0, 1, 2], fresh []" in ack.detail
        await d.wait_events("exited", 3, epoch=2, timeout=180)
        return dump, d
    finally:
        await stop_agent(agent)
        await agent.wait()


async def test_dp4_to_dp3_keeps_processes_and_partial_results(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    free, _ = await _run(coordinator, tmp_path, "free", crash=False)
    shrunk, d = await _run(coordinator, tmp_path, "shrunk", crash=True)
    reps = {r.rank: r.event for _, r in d.events("transition")}
    assert sorted(reps) == [0, 1, 2]
    for rep in reps.values():
        assert isinstance(rep, TransitionReport)
        assert (rep.iteration, rep.in_place, rep.source, rep.from_epoch) == (K, True, "local_device", 1)
        assert (rep.reused_micro_batches, rep.recomputed_micro_batches, rep.rolled_back_iterations) == (
            3,
            1,
            0,
        )
    # lost work: exactly the failed replica's 3 micro-batches, spread over the survivors
    assert sum(int(getattr(r, "recomputed_micro_batches", 0)) for r in reps.values()) == 3
    assert [(r.epoch, r.rank) for _, r in d.events("started")] == [(1, 0), (1, 1), (1, 2), (1, 3)]
    for it in range(K):
        assert _rel(load_state(shrunk, it, 0)["params"], load_state(free, it, 0)["params"]) == 0.0
    assert _rel(load_state(shrunk, K, 0)["params"], load_state(free, K, 0)["params"]) <= 1e-6
    for it in range(K + 1, ITERATIONS):
        assert _rel(load_state(shrunk, it, 0)["params"], load_state(free, it, 0)["params"]) <= 1e-5
