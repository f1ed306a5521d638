"""The worker monitor needs nothing of the supervisor but its host interface (the workers by task, and
where reports go): fed hook events, it reports an exception, a straggler and a hang through the host
alone, and flushes the ranks' statistics."""

from __future__ import annotations

import asyncio
import time

from agents.api import WorkerSpec, WorkerState
from agents.monitor import MonitorConfig
from agents.training.hook_protocol import ExceptionRaised, IterationEnd, IterationStart
from agents.worker_monitor import WorkerMonitor
from agents.workers import TaskGroup, Worker
from controlplane.core.protocol import (
    HangVerdict,
    IterationStats,
    StragglerVerdict,
    WorkerException,
)
from tests.agents.helpers import RecordingHost, launch


def _iterate(monitor: WorkerMonitor, w: Worker, its: range, compute: float) -> None:
    for it in its:
        t = time.time()
        monitor.on_event(w, IterationStart(it=it, t=t))
        monitor.on_event(w, IterationEnd(it=it, t=t + 0.05, dur=0.05, compute=compute, mbs=2))


async def test_the_worker_monitor_reports_through_its_host_alone() -> None:
    cfg = MonitorConfig(straggler_persistence=3)
    spec = WorkerSpec("gpt", 0, launch(dp=2, iterations=100))
    group = TaskGroup(spec, cfg)
    host = RecordingHost(groups={"gpt": group})
    monitor = WorkerMonitor(host, cfg, kill_hung=True, elastic_wait_s=0.0)
    fast, slow = group.workers[0], group.workers[1]

    for it in range(12):  # rank 1 computes three times as long as its peer
        _iterate(monitor, fast, range(it, it + 1), compute=0.01)
        _iterate(monitor, slow, range(it, it + 1), compute=0.03)
    stragglers = [(r, d) for r, e, d in host.sent if isinstance(e, StragglerVerdict)]
    assert stragglers[0] == (1, "statistical_monitoring")
    assert slow.state == WorkerState.UNHEALTHY

    monitor.flush_stats(fast)
    stats = [e for r, e, _ in host.sent if r == 0 and isinstance(e, IterationStats)]
    assert [(s.first_iteration, s.last_iteration, s.micro_batches) for s in stats] == [(0, 11, 24)]

    monitor.on_event(fast, ExceptionRaised(type="RuntimeError", msg="boom", tb="", it=12, t=time.time()))
    assert isinstance(host.sent[-1][1], WorkerException)
    assert host.sent[-1][2] == "exception_propagation"

    now = time.time()
    monitor.on_event(fast, IterationStart(it=12, t=now))
    monitor.check_hang(fast, now + 60.0)  # a minute into an iteration of 50 ms
    for _ in range(50):
        if any(isinstance(e, HangVerdict) for _, e, _ in host.sent):
            break
        await asyncio.sleep(0.01)
    hangs = [(r, e) for r, e, _ in host.sent if isinstance(e, HangVerdict)]
    assert len(hangs) == 1
    assert hangs[0][0] == 0
    assert isinstance(hangs[0][1], HangVerdict)
    assert hangs[0][1].iteration == 12
    monitor.close()
