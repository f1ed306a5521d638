"""Tiny scenarios whose accumulated WAF, downtime and lost work are computed by hand."""

import pytest

from controlplane.core.sim.baselines import (
    CheckpointRestart,
    CheckpointRestartParams,
    ElasticBaseline,
    ElasticParams,
)
from controlplane.core.sim.engine import Simulator
from controlplane.core.sim.model import GPT3_MODELS, Cause, ClusterSpec, SimTask, TableThroughput
from controlplane.core.sim.trace import FailureKind, FailureRecord, Trace

TASK = SimTask("t", GPT3_MODELS["gpt3-1.3b"], weight=2.0, nodes=2)
THROUGHPUT = TableThroughput([[0.0, 5.0, 10.0]])  # 5 FLOP/s on one node, 10 on two
# detection 100 s, requeue 50 s, setup 30 s, checkpoint every 300 s of running
CR = CheckpointRestartParams(detection_s=100, requeue_s=50, setup_s=30, checkpoint_interval_s=300)


def _run(policy, record: FailureRecord, duration: float = 10_000.0):
    trace = Trace("hand", (record,), duration)
    return Simulator(ClusterSpec(2), [TASK], THROUGHPUT, trace, policy).run()


def test_checkpoint_restart_transient_failure() -> None:
    r = _run(CheckpointRestart(CR), FailureRecord(1000.0, 0, 0, FailureKind.PROCESS_CRASH))
    # failure at 1000: 1000 % 300 = 100 s since the checkpoint are lost; detected at 1100,
    # requeue to 1150, setup to 1180, recompute 100 s to 1280, then running again.
    assert r.accumulated_waf == 2 * 10 * (1000 + (10_000 - 1280))
    assert r.downtime.task_s[Cause.DETECTION] == 100
    assert r.downtime.task_s[Cause.REQUEUE] == 50
    assert r.downtime.task_s[Cause.SETUP] == 30
    assert r.downtime.task_s[Cause.RECOMPUTE] == 100
    assert r.lost_work_flops == 100 * 10
    assert r.timeline == ((0.0, 20.0), (1000.0, 0.0), (1280.0, 20.0))


def test_checkpoint_restart_waits_for_repair_when_no_spare_node() -> None:
    r = _run(CheckpointRestart(CR), FailureRecord(1000.0, 1, None, FailureKind.NODE_LOSS, repair_s=2000.0))
    # detected 1100, requeued 1150, holds one node and waits for the repair at 3000, setup to 3030,
    # recompute 100 s to 3130.
    assert r.accumulated_waf == 2 * 10 * (1000 + (10_000 - 3130))
    assert r.downtime.task_s[Cause.WAITING] == 3000 - 1150
    assert r.downtime.task_s[Cause.SETUP] == 30


def test_elastic_shrinks_then_grows_back() -> None:
    params = ElasticParams(
        "hand-elastic",
        throughput_factor=0.5,
        detection_s=10,
        reconfigure_s=60,
        transient_restart_s=20,
        rollback_on_failure=False,
        lost_iterations=0.0,
        checkpoint_interval_s=300,
    )
    r = _run(ElasticBaseline(params), FailureRecord(1000.0, 1, 3, FailureKind.GPU_HARDWARE, repair_s=2000.0))
    # rate 0.5 x 10 on two nodes, 0.5 x 5 on one; down 1000-1070 (detect + reconfigure), one node
    # 1070-3000, reconfigure 3000-3060, two nodes after.
    expected = 2 * (5 * 1000 + 2.5 * (3000 - 1070) + 5 * (10_000 - 3060))
    assert r.accumulated_waf == pytest.approx(expected, rel=1e-12)
    assert r.downtime.task_s[Cause.TRANSITION] == 60 + 60
    assert r.lost_work_flops == 0


def test_failure_on_a_free_node_changes_nothing() -> None:
    trace = Trace("hand", (FailureRecord(50.0, 1, None, FailureKind.NODE_LOSS, 100.0),), 1000.0)
    task = SimTask("t", GPT3_MODELS["gpt3-1.3b"], weight=1.0, nodes=1)
    r = Simulator(ClusterSpec(2), [task], THROUGHPUT, trace, CheckpointRestart(CR)).run()
    assert r.accumulated_waf == 5 * 1000
    assert r.tasks[0].failures == 0


def test_task_completes_and_frees_its_nodes() -> None:
    a = SimTask("a", GPT3_MODELS["gpt3-1.3b"], weight=1.0, nodes=1, work_flops=5 * 400)
    b = SimTask("b", GPT3_MODELS["gpt3-1.3b"], weight=1.0, nodes=2, arrival_s=100.0)
    trace = Trace("hand", (), 1000.0)
    thr = TableThroughput([[0.0, 5.0, 10.0], [0.0, 5.0, 10.0]])
    r = Simulator(ClusterSpec(2), [a, b], thr, trace, CheckpointRestart(CR)).run()
    # a runs 0-400 on one node and completes; b arrives at 100 but needs both nodes: starts at 400
    assert r.tasks[0].completed_at == 400
    assert r.accumulated_waf == 5 * 400 + 10 * 600
    assert r.downtime.task_s[Cause.QUEUED] == 300
