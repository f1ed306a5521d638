"""Real Megatron-Core workers (DP2) under a real agent, launched with the recipe's data (a validation
share in its split) and an eval section, measure the validation loss after every ``interval``-th
iteration on held-out samples: the last rank's statistics carry it tagged with that iteration, it is
finite, both replicas agree on it (the global batch's mean), and evaluation time is no iteration's."""

from __future__ import annotations

import math
import shutil
import tempfile
from pathlib import Path

import pytest

from agents.testing import TestCoordinator, spawn_agent, stop_agent
from controlplane.core.protocol import IterationStats, ModelSpec
from controlplane.core.recipe import DataSection
from controlplane.core.recipe.model import EvalSection
from tests.agents.helpers import launch, start_command

pytestmark = pytest.mark.slow


async def test_validation_loss_comes_after_every_interval(
    coordinator: TestCoordinator, prepared_corpus: Path, tmp_path: Path
) -> None:
    cache = Path(tempfile.gettempdir()) / "unicron-data" / "task-gpt-eval"
    shutil.rmtree(cache, ignore_errors=True)
    agent = await spawn_agent(coordinator.url, "real-eval", 2, tmp_path / "agent")
    data = DataSection(
        tokenizer=f"{prepared_corpus}/tokenizer.json",
        blend=[{"path_prefix": f"{prepared_corpus}/pydoc"}],  # type: ignore[list-item]
        split="80,20,0",
    )
    model = ModelSpec(layers=2, hidden=64, heads=4, seq_len=32, vocab=512, micro_batch=2, global_batch=8)
    try:
        await coordinator.wait_for(lambda: coordinator.messages("hello", "real-eval"), 20)
        wl = launch(dp=2, iterations=9, model=model).model_copy(
            update={"data": data, "eval": EvalSection(interval=3, iterations=2)}
        )
        cmd = start_command("gpt-eval", 1, wl, "s1")
        assert (await coordinator.command("real-eval", cmd)).outcome == "done"
        await coordinator.wait_for(lambda: len(coordinator.reports("exited")) >= 2, 180)
        exits = [r.event for _, r in coordinator.reports("exited")]
        assert sorted((e.exit_code, e.expected) for e in exits) == [(0, True)] * 2, exits  # type: ignore[union-attr]
        measured: dict[int, dict[int, float]] = {0: {}, 1: {}}
        for _, r in coordinator.reports("iteration_stats"):
            stats = r.event
            assert isinstance(stats, IterationStats)
            if stats.validation_loss is not None:
                assert stats.validation_iteration is not None
                # it goes out with the rank's next statistics: those of its interval, or of the next one
                # when the interval's statistics were sent while the evaluation ran
                assert stats.validation_iteration <= stats.last_iteration
                measured[r.rank][stats.validation_iteration] = stats.validation_loss
        last = measured[1]
        assert sorted(last) == [2, 5, 8], measured
        assert all(math.isfinite(v) for v in last.values())
        # an untrained model is at ln(512) = 6.24; nine small steps leave it near there
        assert all(0 < v < math.log(512) + 1.0 for v in last.values()), last
        # every replica gets the global batch's mean (the sums are reduced over the data-parallel group)
        assert measured[0] == pytest.approx(last, rel=1e-6)
        assert list(cache.glob("*-GPTDataset-valid-sample_index.npy")), "no validation split was indexed"
        assert not coordinator.reports("hang")
        assert not coordinator.reports("straggler")
    finally:
        await stop_agent(agent)
        await agent.wait()
