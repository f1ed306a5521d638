"""A rank that finished its micro-batches and still waits in the gradient all-reduce one hang threshold
later, or whose stack shows it blocked in a pipeline send/receive (every peer it needs is unreachable: a cut
link between two healthy nodes), is reported as hung *in a collective*, which the control plane classifies
as a consequence; a rank stuck in its own work is not."""

from __future__ import annotations

import asyncio
import time

from agents.api import WorkerSpec
from agents.monitor import MonitorConfig
from agents.training.hook_protocol import ComputeDone, IterationEnd, IterationStart
from agents.worker_monitor import WorkerMonitor
from agents.workers import TaskGroup
from controlplane.core.protocol import HangVerdict
from tests.agents.helpers import RecordingHost, launch

PIPELINE_RECEIVE = (
    "Current thread 0x00007f5368687b80 (most recent call first):\n"
    '  File "/site-packages/megatron/core/pipeline_parallel/p2p_communication.py", line 392 in _communicate\n'
)


async def _hang_of(synced: bool, stack: str = "") -> HangVerdict:
    """The verdict on rank 0, a minute into iteration 12, having reported its compute done or not, whose
    captured stack is ``stack``."""
    cfg = MonitorConfig(hang_floor_s=0.05)
    spec = WorkerSpec("gpt", 0, launch(dp=2, iterations=100))
    group = TaskGroup(spec, cfg)
    host = RecordingHost(groups={"gpt": group})
    monitor = WorkerMonitor(host, cfg, kill_hung=False, elastic_wait_s=30.0)
    w = group.workers[0]

    async def capture_stack(wait_s: float = 0.3) -> str:
        return stack

    w.capture_stack = capture_stack  # type: ignore[method-assign]
    for it in range(12):
        t = time.time()
        monitor.on_event(w, IterationStart(it=it, t=t))
        monitor.on_event(w, IterationEnd(it=it, t=t + 0.01, dur=0.01, compute=0.005, mbs=2))
    now = time.time()
    monitor.on_event(w, IterationStart(it=12, t=now))
    if synced:
        monitor.on_event(w, ComputeDone(it=12, t=now))
    monitor.check_hang(w, now + 60.0)
    for _ in range(200):
        hangs = [e for _, e, _ in host.sent if isinstance(e, HangVerdict)]
        if hangs:
            monitor.close()
            return hangs[0]
        await asyncio.sleep(0.01)
    monitor.close()
    raise AssertionError("no hang verdict")


async def test_a_rank_still_waiting_in_the_all_reduce_is_reported_as_hung_in_a_collective() -> None:
    assert (await _hang_of(synced=True)).in_collective is True


async def test_a_rank_blocked_in_a_pipeline_receive_is_reported_as_hung_in_a_collective() -> None:
    assert (await _hang_of(synced=False, stack=PIPELINE_RECEIVE)).in_collective is True


async def test_a_rank_stuck_in_its_own_work_is_not() -> None:
    assert (await _hang_of(synced=False)).in_collective is False
