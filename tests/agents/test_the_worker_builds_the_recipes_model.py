"""The worker builds the model the recipe's model section describes: grouped-query attention, SwiGLU,
rotary positions, RMSNorm and tied embeddings show in the built module's weights, and a training step
on it gives a finite loss; without a model section it builds the plain GPT (multi-head attention,
GELU, learned positions, LayerNorm, untied embeddings)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from controlplane.core.protocol import WorkerLaunch
from controlplane.core.recipe.model import ModelSection
from tests.agents.helpers import free_port
from tests.contract.samples import LAUNCH

PROBE = Path(__file__).with_name("model_probe.py")
HIDDEN, HEADS, GROUPS, FFN = 64, 4, 2, 96


def probe(launch: WorkerLaunch) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(PROBE), launch.model_dump_json(), str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def single_rank(architecture: ModelSection | None) -> WorkerLaunch:
    raw = LAUNCH.model_dump(mode="json") | {
        "parallel": {"tp": 1, "pp": 1, "dp": 1},
        "world_size": 1,
        "ranks": [{"rank": 0, "device": 0}],
        "rendezvous": {"master_addr": "127.0.0.1", "master_port": 1, "timeout_s": 30.0},
        "state_sources": [],
        "checkpoint_dir": None,
        "checkpoint_interval": 0,
        "iterations": 2,
        "architecture": architecture.model_dump(mode="json") if architecture is not None else None,
    }
    # the wire form: the launch as the agent decodes it from the coordinator's JSON
    return WorkerLaunch.model_validate_json(WorkerLaunch.model_validate(raw).model_dump_json())


def test_gqa_swiglu_rope_rmsnorm_and_tied_embeddings_are_built_and_train() -> None:
    arch = ModelSection(
        num_layers=2,
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        num_query_groups=GROUPS,
        ffn_hidden_size=FFN,
        seq_length=32,
        vocab_size=128,
        position_embedding="rope",
        normalization="RMSNorm",
        activation="swiglu",
    )
    assert arch.untie_embeddings is False  # the recipe's default: tied

    got = probe(single_rank(arch))

    head_dim = HIDDEN // HEADS
    assert got["qkv"] == [(HEADS + 2 * GROUPS) * head_dim, HIDDEN]
    assert got["fc1"] == [2 * FFN, HIDDEN]  # gate and up projections
    assert got["fc2"] == [HIDDEN, FFN]
    assert got["position_table"] is False
    assert got["rotary"] is True
    assert got["norm"] == "RMSNorm"
    assert got["final_norm"] == "RMSNorm"
    assert got["tied"] is True
    assert got["output_weight"] is False  # the output layer reads the embedding's weight
    assert math.isfinite(got["loss"])


def test_without_a_model_section_the_plain_gpt_is_built() -> None:
    got = probe(single_rank(None))

    assert got["qkv"] == [3 * HIDDEN, HIDDEN]
    assert got["fc1"] == [4 * HIDDEN, HIDDEN]
    assert got["position_table"] is True
    assert got["rotary"] is False
    assert got["norm"] in ("FusedLayerNorm", "LayerNorm", "WrappedTorchNorm")
    assert got["tied"] is False
    assert got["output_weight"] is True
    assert math.isfinite(got["loss"])
