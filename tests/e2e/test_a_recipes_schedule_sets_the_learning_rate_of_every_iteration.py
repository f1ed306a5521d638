"""The recipe's optimizer and learning-rate schedule reach the worker: a real Megatron-Core rank trains with
megatron-core's OptimizerParamScheduler (linear warm-up, then cosine decay), the learning rate of each
reported iteration is the schedule's value at that iteration, and the gradient norm is reported beside it."""

from __future__ import annotations

import math

import pytest

from controlplane.apps.metrics.choices import MetricKind
from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.training.services import TaskSubmission, do_submit_task
from controlplane.core.recipe import recipe_from_mapping
from tests.e2e.loop import Loop

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

LR, MIN_LR, WARMUP, DECAY = 1e-2, 1e-3, 5, 240
"""A decay long enough to span several one-second reports of a fast tiny model."""


def scheduled_lr(iteration: int) -> float:
    """Megatron's warm-up from 0 and cosine decay to MIN_LR at DECAY, then MIN_LR."""
    if iteration <= WARMUP:
        return LR * iteration / WARMUP
    if iteration > DECAY:
        return MIN_LR
    ratio = (iteration - WARMUP) / (DECAY - WARMUP)
    return MIN_LR + 0.5 * (math.cos(math.pi * ratio) + 1.0) * (LR - MIN_LR)


def test_a_recipes_schedule_sets_the_learning_rate_of_every_iteration(loop: Loop) -> None:
    recipe = recipe_from_mapping(
        {
            "version": 1,
            "model": {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "seq_length": 32}
            | {"vocab_size": 128},
            "optimizer": {
                "name": "adamw",
                "beta1": 0.9,
                "beta2": 0.99,
                "weight_decay": 0.01,
                "clip_grad": 0.5,
            },
            "schedule": {"lr": LR, "min_lr": MIN_LR, "warmup_iterations": WARMUP, "decay_style": "cosine"}
            | {"decay_iterations": DECAY},
            "train_iterations": 100000,
            "global_batch_size": 8,
            "micro_batch_size": 2,
        }
    )
    loop.restart_worker(UNICRON_CHECKPOINT_INTERVAL="0")
    loop.add_node(1, worker="megatron")
    loop.wait_nodes_healthy(1)
    task = do_submit_task(None, TaskSubmission.from_recipe("sched", recipe, min_workers=1, max_workers=1))
    loop.wait_running(task, timeout=150)

    def samples(kind: str) -> list[MetricSample]:
        return list(MetricSample.objects.filter(task=task, kind=kind).order_by("iteration"))

    loop.wait(
        "three learning rates, one past the decay",
        lambda: MetricSample.objects.filter(
            task=task, kind=MetricKind.LEARNING_RATE, iteration__gt=DECAY
        ).exists()
        and MetricSample.objects.filter(task=task, kind=MetricKind.LEARNING_RATE).count() >= 3,
        timeout=180,
    )
    rates = samples(MetricKind.LEARNING_RATE)
    assert len(rates) >= 3
    for s in rates:
        assert s.iteration is not None
        assert s.value == pytest.approx(scheduled_lr(s.iteration), rel=1e-6, abs=1e-12), (
            s.iteration,
            s.value,
        )
    assert any(WARMUP < s.iteration <= DECAY for s in rates if s.iteration is not None), (
        "no sample in the decay"
    )
    norms = samples(MetricKind.GRAD_NORM)
    assert norms, "no gradient norm reported"
    assert all(math.isfinite(s.value) and s.value > 0 for s in norms)
