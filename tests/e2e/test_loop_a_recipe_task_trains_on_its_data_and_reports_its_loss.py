"""The whole path of a real training run: a recipe with a data section is submitted, planned and
launched with its data; a real Megatron-Core worker reads the prepared corpus by global sample index,
and its training loss per reporting interval is stored as the task's series and served by the API."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest

from agents.data.corpus import write_corpus
from agents.data.prepare import prepare
from controlplane.apps.metrics.choices import MetricKind
from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.training.services import TaskSubmission, do_submit_task
from controlplane.core.recipe import recipe_from_mapping
from tests.e2e.loop import Loop

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]


def test_a_recipe_task_trains_on_the_corpus_and_its_loss_is_stored(loop: Loop, tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus", max_bytes=150_000)
    prepare([corpus.path], tmp_path / "pydoc", train_vocab_size=512, append_eod=True)
    recipe = recipe_from_mapping(
        {
            "version": 1,
            "model": {
                "num_layers": 2,
                "hidden_size": 64,
                "num_attention_heads": 4,
                "seq_length": 32,
                "vocab_size": 512,
            },
            "data": {
                "tokenizer": str(tmp_path / "tokenizer.json"),
                "blend": [{"path_prefix": str(tmp_path / "pydoc")}],
                "split": "100,0,0",
            },
            "schedule": {"lr": 1e-3},
            "train_iterations": 100000,
            "global_batch_size": 8,
            "micro_batch_size": 2,
        }
    )
    loop.restart_worker(UNICRON_CHECKPOINT_INTERVAL="0")
    loop.add_node(1, worker="megatron")
    loop.wait_nodes_healthy(1)

    task = do_submit_task(None, TaskSubmission.from_recipe("pydoc", recipe, min_workers=1, max_workers=1))
    loop.wait_running(task, timeout=150)
    losses = loop.wait(
        "training-loss samples",
        lambda: (
            list(MetricSample.objects.filter(task=task, kind=MetricKind.TRAINING_LOSS).order_by("iteration"))
            if MetricSample.objects.filter(
                task=task, kind=MetricKind.TRAINING_LOSS, iteration__gte=60
            ).exists()
            else None
        ),
        timeout=180,
    )

    assert losses[-1].value < math.log(512) - 0.5, [s.value for s in losses]
    cache = Path(tempfile.gettempdir()) / "unicron-data" / f"task-{task.pk}"
    assert list(cache.glob("*-GPTDataset-train-sample_index.npy")), "the worker did not index the corpus"
