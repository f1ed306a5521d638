"""Retry in place (sev3, docs/ARCHITECTURE.md §7.2): after a transient network error in the gradient
all-reduce the
live workers rebuild their process groups at a new rendezvous and repeat the step, keeping the
micro-batches they finished; no process restarts and the parameters stay bitwise those of the
failure-free run (same layout, same summation order).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agents.testing import TaskDriver, TestCoordinator, load_state, same_state, spawn_agent, stop_agent
from agents.training.bench_knobs import ENV_STATE_DUMP
from controlplane.core.protocol import FaultSpec, Rendezvous, TransitionReport
from tests.agents.helpers import free_port, launch

pytestmark = pytest.mark.slow

K = 3
ITERATIONS = 6
NODE = "retry"


async def test_retry_keeps_processes_and_finished_micro_batches(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    dump = tmp_path / "dump"
    dump.mkdir()
    agent = await spawn_agent(
        coordinator.url, NODE, 2, tmp_path / "agent", hang_floor=2.0, extra_env={ENV_STATE_DUMP: str(dump)}
    )
    d = TaskDriver(coordinator)
    try:
        await coordinator.wait_for(lambda: coordinator.messages("hello", NODE), 30)
        await d.start(NODE, 1, launch(dp=2, iterations=ITERATIONS))
        await d.inject(NODE, 1, FaultSpec(kind="network_error", rank=1, at_iteration=K))
        excs = await d.wait_events("exception", 2)
        assert {r.rank for r in excs} == {0, 1}
        assert all(r.event.in_collective for r in excs)  # type: ignore[union-attr]
        assert d.events("exited") == []  # elastic mode: both wait for the coordinator's order
        ack = await d.retry(
            NODE, 2, Rendezvous(master_addr="127.0.0.1", master_port=free_port(), timeout_s=20)
        )
        assert "in place [0, 1], restarted []" in ack.detail
        reps = await d.wait_events("transition", 2, epoch=2)
        exits = await d.wait_events("exited", 2, epoch=2)
    finally:
        await stop_agent(agent)
        await agent.wait()
    for r in reps:
        rep = r.event
        assert isinstance(rep, TransitionReport)
        assert (rep.iteration, rep.in_place, rep.source, rep.from_epoch) == (K, True, "local_device", 1)
        # each replica had finished its 2 micro-batches when the all-reduce failed: nothing is lost
        assert (rep.reused_micro_batches, rep.recomputed_micro_batches, rep.rolled_back_iterations) == (
            2,
            0,
            0,
        )
    assert all(r.event.exit_code == 0 for r in exits)  # type: ignore[union-attr]
    assert [(r.epoch, r.rank) for r in (x for _, x in d.events("started"))] == [(1, 0), (1, 1)]

    # the failure-free run, for comparison
    free = tmp_path / "free"
    free.mkdir()
    agent = await spawn_agent(
        coordinator.url, "free", 2, tmp_path / "free-agent", extra_env={ENV_STATE_DUMP: str(free)}
    )
    f = TaskDriver(coordinator, task_id="free")
    try:
        await coordinator.wait_for(lambda: coordinator.messages("hello", "free"), 30)
        await f.start("free", 1, launch(dp=2, iterations=ITERATIONS))
        await f.wait_events("exited", 2)
    finally:
        await stop_agent(agent)
        await agent.wait()
    for it in range(ITERATIONS):
        for rank in (0, 1):
            mine = load_state(dump, it, rank)
            ref = load_state(free, it, rank)
            assert all(torch.equal(mine["params"][k], ref["params"][k]) for k in ref["params"]), (it, rank)
            assert all(
                torch.equal(a, b) for a, b in zip(mine["optimizer"][0], ref["optimizer"][0], strict=True)
            )


async def test_retry_in_place_rebuilds_tensor_parallel_groups(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    """TP2: the model's modules hold the TP group, so the kept parameters move into a model built in
    the new groups; the run stays bitwise the failure-free one."""
    runs = {}
    for name, fault in (("tp-free", False), ("tp-retry", True)):
        dump = tmp_path / name
        dump.mkdir()
        agent = await spawn_agent(
            coordinator.url,
            name,
            2,
            tmp_path / f"{name}-agent",
            hang_floor=3.0,
            extra_env={ENV_STATE_DUMP: str(dump)},
        )
        d = TaskDriver(coordinator, task_id=name)
        try:
            await coordinator.wait_for(lambda name=name: coordinator.messages("hello", name), 30)  # type: ignore[misc]
            await d.start(name, 1, launch(tp=2, dp=1, iterations=ITERATIONS))
            if fault:
                await d.inject(name, 1, FaultSpec(kind="network_error", rank=1, at_iteration=K))
                await d.wait_events("exception", 2)
                rdzv = Rendezvous(master_addr="127.0.0.1", master_port=free_port(), timeout_s=20)
                ack = await d.retry(name, 2, rdzv)
                assert "in place [0, 1], restarted []" in ack.detail
                reps = await d.wait_events("transition", 2, epoch=2)
                assert all(r.event.in_place and r.event.iteration == K for r in reps)  # type: ignore[union-attr]
                await d.wait_events("exited", 2, epoch=2)
            else:
                await d.wait_events("exited", 2)
        finally:
            await stop_agent(agent)
            await agent.wait()
        runs[name] = dump
    for it in range(ITERATIONS):
        for rank in (0, 1):
            assert same_state(
                load_state(runs["tp-retry"], it, rank), load_state(runs["tp-free"], it, rank)
            ), (it, rank)
