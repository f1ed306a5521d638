"""Ours on one task: a transient network error costs detection + one repeated step; a lost node
costs a re-plan with the planning core's transition model. Expected values are derived by hand from
the throughput table and latency profile, not taken from a previous run."""

import pytest

from controlplane.core.sim.engine import Simulator
from controlplane.core.sim.model import GPT3_MODELS, Cause, ClusterSpec, SimTask
from controlplane.core.sim.ours import LatencyProfile, PlannerThroughput, Unicron, severity_of
from controlplane.core.sim.trace import FailureKind, FailureRecord, Trace

CLUSTER = ClusterSpec(nodes=2, gpus_per_node=8)
TASK = SimTask("t", GPT3_MODELS["gpt3-1.3b"], weight=3.0, nodes=2)
LAT = LatencyProfile()


def test_kinds_map_to_the_design_severities() -> None:
    assert severity_of(FailureKind.NETWORK_TRANSIENT).value == "sev3"
    assert severity_of(FailureKind.COLLECTIVE_TIMEOUT).value == "sev3"
    assert severity_of(FailureKind.PROCESS_CRASH).value == "sev2"
    assert severity_of(FailureKind.CUDA_ERROR).value == "sev2"
    assert severity_of(FailureKind.GPU_HARDWARE).value == "sev1"
    assert severity_of(FailureKind.NODE_LOSS).value == "sev1"


def test_transient_network_error_is_retried_in_place() -> None:
    tp = PlannerThroughput(CLUSTER, [TASK])
    trace = Trace("hand", (FailureRecord(500.0, 0, 1, FailureKind.NETWORK_TRANSIENT),), 5000.0)
    r = Simulator(CLUSTER, [TASK], tp, trace, Unicron(tp, LAT)).run()
    rate = tp.flops(0, 2)
    it = tp.iteration_s(0, 2)
    detect = LAT.detection_s[FailureKind.NETWORK_TRANSIENT]
    assert r.accumulated_waf == pytest.approx(3.0 * rate * (5000.0 - detect - it), rel=1e-12)
    assert r.downtime.task_s[Cause.RETRY] == pytest.approx(it)
    assert r.lost_work_flops == 0


def test_lost_node_replans_onto_the_survivor_then_grows_back() -> None:
    tp = PlannerThroughput(CLUSTER, [TASK])
    rec = FailureRecord(500.0, 1, None, FailureKind.NODE_LOSS, repair_s=1000.0)
    policy = Unicron(tp, LAT)
    r = Simulator(CLUSTER, [TASK], tp, Trace("hand", (rec,), 5000.0), policy).run()
    model = policy._transition[0]
    g = CLUSTER.gpus_per_node
    f2, f1 = tp.flops(0, 2), tp.flops(0, 1)
    # shrink: 8 surviving workers hold a full replica iff 8 >= tp*pp of the 1-node config
    shrink = model.duration_s(g, g, hit=True, shard_ways=tp.shard_ways(0, 1))
    grow = model.duration_s(g, 2 * g, hit=False, shard_ways=tp.shard_ways(0, 2))
    detect = LAT.detection_s[FailureKind.NODE_LOSS]
    lost_s = tp.iteration_s(0, 1) / tp.dp_of(0, 1)  # the failed replica's micro-batches
    lost_flops = lost_s * f2  # recomputed at the new (one-node) rate before new progress
    t_run1 = 500.0 + detect + LAT.lookup_s + shrink + lost_flops / f1
    expected = 3.0 * (f2 * 500.0 + f1 * (1500.0 - t_run1) + f2 * (5000.0 - 1500.0 - grow))
    assert r.accumulated_waf == pytest.approx(expected, rel=1e-9)
    assert r.lost_work_flops == pytest.approx(lost_flops)
