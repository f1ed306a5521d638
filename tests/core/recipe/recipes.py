"""A valid recipe as a mapping, and the example recipe's path, shared by the recipe tests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[3] / "agents" / "data" / "recipes" / "tiny-gpt.yaml"

_VALID: dict[str, Any] = {
    "version": 1,
    "model": {
        "num_layers": 12,
        "hidden_size": 768,
        "num_attention_heads": 12,
        "num_query_groups": 4,
        "seq_length": 1024,
        "position_embedding": "rope",
        "normalization": "RMSNorm",
        "activation": "swiglu",
        "untie_embeddings": True,
        "hidden_dropout": 0.1,
        "attention_dropout": 0.0,
        "provider": "mypkg.models:gpt_provider",
    },
    "data": {
        "tokenizer": "/shared/tok/tokenizer.json",
        "train": [
            {"path_prefix": "/shared/data/web_text_document", "weight": 0.7},
            {"path_prefix": "/shared/data/code_text_document", "weight": 0.3},
        ],
        "valid": [{"path_prefix": "/shared/data/held_out_text_document", "weight": 1.0}],
    },
    "optimizer": {
        "name": "adam",
        "beta1": 0.9,
        "beta2": 0.95,
        "eps": 1e-8,
        "weight_decay": 0.1,
        "clip_grad": 1.0,
    },
    "schedule": {
        "lr": 6e-4,
        "min_lr": 6e-5,
        "warmup_iterations": 100,
        "decay_style": "cosine",
        "decay_iterations": 900,
    },
    "checkpoint": {"directory": "/shared/ckpt/run1", "interval": 200, "keep": 3, "format": "torch_dist"},
    "eval": {"interval": 100, "iterations": 10},
    "seed": 7,
    "train_iterations": 1000,
    "global_batch_size": 64,
    "micro_batch_size": 4,
}


def valid_recipe() -> dict[str, Any]:
    """A fresh deep copy of a recipe that uses every section and most options."""
    return copy.deepcopy(_VALID)
