from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.core.planning import (
    DEVICE_KINDS,
    GPTSpec,
    enumerate_configs,
    fits_memory,
    get_device_kind,
    memory_per_device,
)

specs = st.builds(
    lambda layers, heads, head_dim, seq, gb, mb: GPTSpec(
        layers, heads * head_dim, heads, seq, 50257, gb * mb, mb
    ),
    st.sampled_from([2, 4, 12, 24, 32, 40, 96]),
    st.sampled_from([4, 8, 16, 32, 96]),
    st.sampled_from([32, 64, 128]),
    st.sampled_from([256, 1024, 2048]),
    st.sampled_from([8, 64, 96, 512]),
    st.sampled_from([1, 2, 4]),
)


@settings(max_examples=80, deadline=None)
@given(specs, st.sampled_from(sorted(DEVICE_KINDS)), st.integers(1, 256))
def test_every_enumerated_config_is_a_valid_factorisation_that_fits(
    spec: GPTSpec, kind_name: str, x: int
) -> None:
    kind = get_device_kind(kind_name)
    for cfg in enumerate_configs(spec, kind, x):
        assert cfg.tp * cfg.pp * cfg.dp == x
        assert spec.num_attention_heads % cfg.tp == 0
        assert kind.devices_per_node % cfg.tp == 0
        assert spec.num_layers % cfg.pp == 0
        assert cfg.dp * cfg.micro_batch * cfg.num_micro_batches == spec.global_batch_size
        assert fits_memory(spec, kind, cfg)
        assert memory_per_device(spec, cfg) <= kind.memory_bytes


def test_recomputation_is_what_makes_a_memory_bound_config_fit() -> None:
    # GPT-3 175B on 64 A100-80GB with tp=8, pp=8: the activations only fit when recomputed.
    spec = GPTSpec(96, 12288, 96, 2048, 51200, 1536, 1)
    kind = get_device_kind("a100-80g")
    cfgs = [c for c in enumerate_configs(spec, kind, 128) if c.tp == 8 and c.pp == 16]
    assert cfgs
    assert all(c.recompute for c in cfgs)
    unchecked = [
        c for c in enumerate_configs(spec, kind, 128, check_memory=False) if c.tp == 8 and c.pp == 16
    ]
    assert any(not c.recompute for c in unchecked)
