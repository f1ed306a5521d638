"""A valid task spec for the submission tests and a helper asserting that nothing was stored."""

from __future__ import annotations

from typing import Any

from controlplane.apps.accounts.models import AuditEntry
from controlplane.apps.training.models import TrainingTask


def valid_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "gpt-small",
        "num_layers": 4,
        "hidden_size": 256,
        "num_attention_heads": 8,
        "seq_length": 512,
        "vocab_size": 32000,
        "global_batch_size": 32,
        "micro_batch_size": 4,
        "weight": 1.0,
        "min_workers": 1,
        "max_workers": 8,
    }
    spec.update(overrides)
    return spec


def assert_nothing_stored() -> None:
    assert TrainingTask.objects.count() == 0
    assert AuditEntry.objects.filter(verb="submit_task").count() == 0
