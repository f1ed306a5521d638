"""Generated traces follow their published rate and mix, and are a function of the seed."""

from controlplane.core.sim.trace import ANT, LLAMA3, NAMED_TRACES, TRANSIENT_SHARE, generate_trace


def test_same_seed_same_trace_other_seed_other_trace() -> None:
    a = generate_trace(ANT.scaled(20), nodes=16, gpus_per_node=8, duration_s=30 * 86400, seed=7)
    b = generate_trace(ANT.scaled(20), nodes=16, gpus_per_node=8, duration_s=30 * 86400, seed=7)
    c = generate_trace(ANT.scaled(20), nodes=16, gpus_per_node=8, duration_s=30 * 86400, seed=8)
    assert a.records == b.records
    assert a.records != c.records


def test_llama3_rate_at_paper_scale() -> None:
    # 419 interruptions in 54 days on 16,384 GPUs: a 54-day trace should have about 419 (Poisson sd ~20)
    trace = generate_trace(LLAMA3, nodes=2048, gpus_per_node=8, duration_s=54 * 86400, seed=1)
    assert 419 - 80 < trace.count < 419 + 80
    hardware = sum(r.kind.is_hardware for r in trace.records) / trace.count
    assert 0.70 < hardware < 0.86


def test_ant_mix_is_73_percent_transient() -> None:
    assert abs((1 - ANT.hardware_share) - TRANSIENT_SHARE) < 1e-9
    trace = generate_trace(ANT.scaled(100), nodes=64, gpus_per_node=8, duration_s=60 * 86400, seed=2)
    transient = sum(not r.kind.is_hardware for r in trace.records) / trace.count
    assert abs(transient - 0.73) < 0.05
    assert all(r.repair_s is not None and r.repair_s > 0 for r in trace.records if r.kind.is_hardware)
    assert all(r.repair_s is None for r in trace.records if not r.kind.is_hardware)


def test_named_traces_differ_in_frequency() -> None:
    a = NAMED_TRACES["trace-a"].build(16, 8)
    b = NAMED_TRACES["trace-b"].build(16, 8)
    assert b.count > 2 * a.count > 0
