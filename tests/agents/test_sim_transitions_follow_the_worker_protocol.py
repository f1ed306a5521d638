"""Simulated workers follow the real workers' transition protocol (--worker sim): reconfigure keeps
live workers in place under their new rank and epoch, fresh ranks start, every rank sends a
TransitionReport after its first iteration in the new epoch, and a network error leaves the
worker waiting for a retry in place instead of exiting."""

from __future__ import annotations

import asyncio

from agents.agent import Agent
from agents.testing import TaskDriver, TestCoordinator
from controlplane.core.protocol import (
    FaultSpec,
    ModelSpec,
    ParallelConfig,
    RankAssignment,
    Rendezvous,
    StateSource,
    TransitionReport,
)
from tests.agents.helpers import free_port, launch

MODEL = ModelSpec(layers=4, hidden=1024, heads=8, seq_len=1024, vocab=32000, micro_batch=1, global_batch=16)


async def test_reconfigure_moves_live_sim_workers_in_place(
    coordinator: TestCoordinator, sim_agent: Agent
) -> None:
    d = TaskDriver(coordinator)
    await d.start("sim-a", 1, launch(dp=2, model=MODEL, iterations=10**6))
    await d.wait_iteration(3)
    pids_before = {r: w.handle for r, w in sim_agent.supervisor.groups["t"].workers.items()}
    # renumbered: old rank 0 (device 0) becomes rank 1, old rank 1 (device 1) becomes rank 0
    grown = launch(dp=3, model=MODEL, iterations=10**6).model_copy(
        update={
            "ranks": [
                RankAssignment(rank=0, device=1),
                RankAssignment(rank=1, device=0),
                RankAssignment(rank=2, device=2),
            ],
            "state_sources": [StateSource(rank=2, kind="same_node", source_node="sim-a", source_rank=0)],
        }
    )
    ack = await d.reconfigure(
        "sim-a", 2, grown, previous_epoch=1, previous_parallel=ParallelConfig(dp=2), survivors={0: 1, 1: 0}
    )
    assert "in place [0, 1], fresh [2]" in ack.detail
    workers = sim_agent.supervisor.groups["t"].workers
    # the processes (here: coroutines) survive under their new ranks
    assert (workers[1].handle, workers[0].handle) == (pids_before[0], pids_before[1])
    reps = {r.rank: r.event for r in await d.wait_events("transition", 3, epoch=2, timeout=30)}
    for rank in (0, 1):
        rep = reps[rank]
        assert isinstance(rep, TransitionReport)
        assert (rep.in_place, rep.source, rep.from_epoch) == (True, "local_device", 1)
    fresh = reps[2]
    assert isinstance(fresh, TransitionReport)
    assert (fresh.in_place, fresh.source, fresh.source_rank) == (False, "same_node", 0)
    assert fresh.bytes_moved > 0
    assert fresh.phases_s["migrate"] > 0
    # reports of the new epoch carry the new ranks; no stop/exit happened
    assert d.events("exited") == []
    assert {w.epoch for w in sim_agent.supervisor.statuses()} == {2}


async def test_a_network_error_waits_for_a_retry_in_place(
    coordinator: TestCoordinator, sim_agent: Agent
) -> None:
    d = TaskDriver(coordinator)
    await d.start("sim-a", 1, launch(dp=2, model=MODEL, iterations=10**6))
    await d.wait_iteration(2)
    await d.inject("sim-a", 1, FaultSpec(kind="network_error", rank=1))
    (exc,) = await d.wait_events("exception", 1, timeout=10)
    assert exc.event.in_collective  # type: ignore[union-attr]
    ack = await d.retry("sim-a", 2, Rendezvous(master_addr="127.0.0.1", master_port=free_port()))
    assert "in place [0, 1], restarted []" in ack.detail
    reps = await d.wait_events("transition", 2, epoch=2, timeout=30)
    assert all(r.event.in_place for r in reps)  # type: ignore[union-attr]
    assert d.events("exited") == []


async def test_a_rank_that_has_not_reached_its_epochs_loop_is_not_kept_as_a_survivor(
    coordinator: TestCoordinator, sim_agent: Agent
) -> None:
    """A rank moved to epoch 2 that has not finished an iteration there (it may sit in a rendezvous whose
    peers are gone) is started afresh by the next reconfiguration, not kept in place. The epoch-1
    iteration still in flight when the order arrives ends after it and must not count as epoch 2's."""
    d = TaskDriver(coordinator)
    # epoch 1's iterations take ~0.6 s, so the order below lands in the middle of one
    first = launch(dp=2, model=MODEL.model_copy(update={"layers": 128}), iterations=10**6)
    await d.start("sim-a", 1, first)
    await d.wait_iteration(1)
    same = launch(dp=2, model=MODEL, iterations=10**6)
    # epoch 2's first iteration takes minutes (a model a thousand times larger), so however slowly the
    # next command arrives its ranks have not finished an iteration there
    slow = launch(dp=2, model=MODEL.model_copy(update={"layers": 4096}), iterations=10**6)
    ack = await d.reconfigure(
        "sim-a", 2, slow, previous_epoch=1, previous_parallel=ParallelConfig(dp=2), survivors={0: 0, 1: 1}
    )
    assert "in place [0, 1], fresh []" in ack.detail
    await asyncio.sleep(1.0)  # the epoch-1 iteration in flight has ended by now
    ack = await d.reconfigure(
        "sim-a", 3, same, previous_epoch=2, previous_parallel=ParallelConfig(dp=2), survivors={0: 0, 1: 1}
    )
    assert "in place [], fresh [0, 1]" in ack.detail
    await d.wait_events("transition", 2, epoch=3, timeout=30)
