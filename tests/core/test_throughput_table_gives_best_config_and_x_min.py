from controlplane.core.planning import (
    Efficiency,
    GPTSpec,
    build_throughput_table,
    enumerate_configs,
    get_device_kind,
    iteration_time,
)

GPT3_175B = GPTSpec(96, 12288, 96, 2048, 51200, 1536, 1)
GPT_1B = GPTSpec(24, 2048, 16, 2048, 51200, 512, 4)


def test_x_min_is_the_smallest_count_with_any_config_that_fits() -> None:
    kind = get_device_kind("a100-80g")
    table = build_throughput_table(GPT3_175B, kind, 256, unit=8)
    assert table.x_min is not None
    assert table.x_min == min(table.feasible_counts)
    below = range(8, table.x_min, 8)
    assert all(not list(enumerate_configs(GPT3_175B, kind, x)) for x in below)
    # 175B params x 16 bytes = 2.8 TB of model state cannot fit in fewer than 2.8e12 / 72e9 devices
    assert table.x_min * 80e9 > GPT3_175B.model_state_bytes()


def test_the_table_stores_the_fastest_config_at_each_count() -> None:
    kind = get_device_kind("h100-80g")
    eff = Efficiency()
    table = build_throughput_table(GPT_1B, kind, 32, eff, unit=8)
    for x in table.feasible_counts:
        best = min(iteration_time(GPT_1B, kind, c, eff) for c in enumerate_configs(GPT_1B, kind, x))
        cfg = table.best_config(x)
        assert cfg is not None
        assert cfg.world_size == x
        assert iteration_time(GPT_1B, kind, cfg, eff) == best
        assert table.throughput(x) == GPT_1B.flops_per_iteration() / best


def test_infeasible_counts_have_zero_throughput_and_no_config() -> None:
    table = build_throughput_table(GPT3_175B, get_device_kind("a100-80g"), 64, unit=8)
    assert table.throughput(8) == 0.0
    assert table.best_config(8) is None
    assert not table.is_feasible(8)


def test_a_task_too_big_for_the_devices_has_no_x_min() -> None:
    table = build_throughput_table(GPT3_175B, get_device_kind("cpu-slot"), 64)
    assert table.x_min is None
    assert table.feasible_counts == ()


def test_modelled_gpt3_throughput_per_gpu_is_in_the_range_megatron_reports() -> None:
    # Narayanan et al. SC'21 Table 1: GPT-3 175B on 1,024 A100s reaches 140 TFLOP/s per GPU (45 %).
    table = build_throughput_table(GPT3_175B, get_device_kind("a100-80g"), 1024, unit=512)
    per_gpu = table.throughput(1024) / 1024
    assert 100e12 < per_gpu < 160e12


def test_equally_fast_configs_keep_the_tasks_micro_batch() -> None:
    """At PP = 1 the model charges nothing per micro-batch, so micro-batch 1 and the task's own tie:
    the table keeps the larger (the CPU workers ran 1.7x slower at micro-batch 1 than at 2)."""
    spec = GPTSpec(2, 64, 4, 32, 128, 16, 2)
    kind = get_device_kind("cpu-slot")
    table = build_throughput_table(spec, kind, 2)
    for x in table.feasible_counts:
        cfg = table.best_config(x)
        assert cfg is not None
        assert cfg.pp == 1
        assert cfg.micro_batch == 2
