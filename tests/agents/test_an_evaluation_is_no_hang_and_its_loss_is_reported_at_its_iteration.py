"""The agent's side of an evaluation: the phase the worker marks ``evaluation`` is not judged a hang
however long it takes (the monitors leave it out), and the evaluation's loss goes out at once in the
rank's statistics, tagged with the iteration it followed, once."""

from __future__ import annotations

import time
from pathlib import Path

from agents.api import WorkerSpec
from agents.supervisor import Supervisor
from agents.training.hook_protocol import (
    Evaluated,
    IterationEnd,
    IterationStart,
    SlowPhase,
    decode_event,
    encode,
)
from agents.workers import Worker
from controlplane.core.protocol import IterationStats, WorkerReport
from tests.agents.helpers import launch


def iterate(sup: Supervisor, w: Worker, its: range, dur: float = 0.05) -> None:
    for it in its:
        t = time.time()
        sup.on_event(w, IterationStart(it=it, t=t))
        sup.on_event(w, IterationEnd(it=it, t=t + dur, dur=dur, compute=dur, mbs=4, loss=6.0))


def test_evaluation_is_not_a_hang_and_its_loss_is_reported_once_at_its_iteration(tmp_path: Path) -> None:
    sent: list[WorkerReport] = []
    sup = Supervisor(sent.append, run_dir=tmp_path)
    w = Worker(WorkerSpec("gpt", 1, launch(dp=1, iterations=100)), 0, 0, sup.cfg)
    iterate(sup, w, range(20))
    sent.clear()

    start = time.time()
    sup.on_event(w, SlowPhase(phase="evaluation", state="begin", t=start))
    sup.worker_monitor.check_hang(w, start + 60.0)  # 60 s into the evaluation, after 50 ms iterations
    assert not w.hang_reported
    assert not sent
    sup.on_event(w, SlowPhase(phase="evaluation", state="end", t=start + 60.0))
    # the frame as the worker writes it on the hook socket
    sup.on_event(w, decode_event(encode(Evaluated(t=start + 60.0, it=19, loss=5.75))))

    stats = [r.event for r in sent if isinstance(r.event, IterationStats)]
    assert len(stats) == 1
    assert (stats[0].validation_iteration, stats[0].validation_loss) == (19, 5.75)
    assert stats[0].last_iteration == 19
    assert stats[0].max_s == 0.05  # the evaluation's time is no iteration's

    iterate(sup, w, range(20, 23))
    sup.worker_monitor.flush_stats(w)
    later = [r.event for r in sent if isinstance(r.event, IterationStats)][1:]
    assert [(s.first_iteration, s.last_iteration, s.validation_loss) for s in later] == [(20, 22, None)]
