"""A real Megatron-Core worker under a real agent, launched with the recipe's data section, trains on
the prepared corpus (by global sample index) instead of the synthetic sequences, and its loss falls."""

from __future__ import annotations

import math
import shutil
import tempfile
from pathlib import Path

import pytest

from agents.testing import TestCoordinator, spawn_agent, stop_agent
from controlplane.core.protocol import ModelSpec
from controlplane.core.recipe import DataSection
from tests.agents.helpers import launch, start_command

pytestmark = pytest.mark.slow


async def test_a_worker_with_a_data_section_trains_on_the_corpus(
    coordinator: TestCoordinator, prepared_corpus: Path, tmp_path: Path
) -> None:
    cache = Path(tempfile.gettempdir()) / "unicron-data" / "task-gpt"
    shutil.rmtree(cache, ignore_errors=True)
    agent = await spawn_agent(coordinator.url, "real-data", 1, tmp_path / "agent")
    data = DataSection(
        tokenizer=f"{prepared_corpus}/tokenizer.json",
        blend=[{"path_prefix": f"{prepared_corpus}/pydoc"}],  # type: ignore[list-item]
        split="100,0,0",
    )
    model = ModelSpec(layers=2, hidden=64, heads=4, seq_len=32, vocab=512, micro_batch=2, global_batch=8)
    try:
        await coordinator.wait_for(lambda: coordinator.messages("hello", "real-data"), 20)
        wl = launch(dp=1, iterations=60, model=model).model_copy(update={"data": data})
        assert (await coordinator.command("real-data", start_command("gpt", 1, wl, "s1"))).outcome == "done"
        await coordinator.wait_for(lambda: len(coordinator.reports("exited")) >= 1, 120)
        exits = [r.event for _, r in coordinator.reports("exited")]
        assert [(e.exit_code, e.expected) for e in exits] == [(0, True)], exits  # type: ignore[union-attr]
        losses = [
            r.event.loss  # type: ignore[union-attr]
            for _, r in coordinator.reports("iteration_stats")
            if r.event.loss is not None  # type: ignore[union-attr]
        ]
        assert losses
        assert list(cache.glob("*-GPTDataset-train-sample_index.npy")), "the corpus was not indexed"
        # an untrained model is at ln(512) = 6.24 on any text; real text is learnable, not random
        assert losses[-1] < math.log(512) - 0.5, losses
    finally:
        await stop_agent(agent)
        await agent.wait()
