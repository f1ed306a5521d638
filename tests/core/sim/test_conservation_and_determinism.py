"""Under any trace and any policy, devices in use never exceed healthy capacity, no node is in two
tasks, and the WAF rate never exceeds the failure-free optimum; a run is a function of its seed."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.core.sim.api import ALL_POLICIES, SimulationRequest, build_policy, paper_tasks, simulate
from controlplane.core.sim.engine import Simulator
from controlplane.core.sim.model import GPT3_MODELS, ClusterSpec, SimTask
from controlplane.core.sim.ours import LatencyProfile, PlannerThroughput
from controlplane.core.sim.trace import FailureKind, FailureRecord, Trace

CLUSTER = ClusterSpec(nodes=4, gpus_per_node=8)
TASKS = (
    SimTask("a", GPT3_MODELS["gpt3-1.3b"], weight=1.0, nodes=2, max_nodes=3),
    SimTask("b", GPT3_MODELS["gpt3-2.7b"], weight=2.0, nodes=1, max_nodes=3),
    SimTask("c", GPT3_MODELS["gpt3-1.3b"], weight=0.5, nodes=1, arrival_s=3000.0, work_flops=3e18),
)
DURATION = 20_000.0

records = st.lists(
    st.tuples(
        st.floats(0, DURATION, allow_nan=False),
        st.integers(0, CLUSTER.nodes - 1),
        st.sampled_from(list(FailureKind)),
        st.floats(1.0, 8000.0, allow_nan=False),
    ),
    max_size=25,
)


def _trace(rows: list[tuple[float, int, FailureKind, float]]) -> Trace:
    recs = tuple(
        FailureRecord(t, n, None if k.is_node_level else 0, k, rep if k.is_hardware else None)
        for t, n, k, rep in sorted(rows, key=lambda r: r[0])
    )
    return Trace("random", recs, DURATION)


class CapacityCheckingSimulator(Simulator):
    """Checks, after every event, that allocated devices fit in the healthy capacity."""

    max_seen_gpus = 0

    def _record_rate(self) -> None:
        super()._record_rate()
        used = sum(self.nodes_of(i) for i in range(len(self.tasks))) * self.cluster.gpus_per_node
        assert used <= self.healthy_nodes() * self.cluster.gpus_per_node
        self.max_seen_gpus = max(self.max_seen_gpus, used)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=records, policy=st.sampled_from(ALL_POLICIES))
def test_devices_never_exceed_capacity(
    rows: list[tuple[float, int, FailureKind, float]], policy: str
) -> None:
    tp = PlannerThroughput(CLUSTER, TASKS, [min(t.max_nodes or 4, 4) for t in TASKS])
    sizes = {0: 2, 1: 2, 2: 1}
    pol = build_policy(policy, tp, LatencyProfile(), sizes, [3, 3, 4])
    sim = CapacityCheckingSimulator(CLUSTER, TASKS, tp, _trace(rows), pol, check_invariants=True)
    result = sim.run()
    assert sim.max_seen_gpus <= CLUSTER.gpus
    # the cluster WAF never exceeds what all tasks would make on their best counts, failure-free
    bound = sum(t.weight * max(tp.flops(i, n) for n in range(5)) for i, t in enumerate(TASKS))
    assert all(rate <= bound * (1 + 1e-9) for _, rate in result.timeline)
    assert 0 <= result.accumulated_waf <= bound * DURATION


def test_same_request_same_report() -> None:
    req = SimulationRequest(ClusterSpec(16), paper_tasks(), trace="trace-b", policies=ALL_POLICIES)
    a, b = simulate(req), simulate(req)
    for name in ALL_POLICIES:
        ra, rb = a.outcomes[name].result, b.outcomes[name].result
        assert ra.accumulated_waf == rb.accumulated_waf
        assert ra.timeline == rb.timeline
        assert ra.downtime == rb.downtime


def test_another_seed_gives_another_run() -> None:
    base = SimulationRequest(ClusterSpec(16), paper_tasks(), trace="trace-b", policies=("unicron",))
    a = simulate(base)
    b = simulate(
        SimulationRequest(ClusterSpec(16), paper_tasks(), trace="trace-b", seed=99, policies=("unicron",))
    )
    assert a.trace.records != b.trace.records
    assert a.outcomes["unicron"].result.accumulated_waf != b.outcomes["unicron"].result.accumulated_waf
