"""Workers of a recipe whose ``model.provider`` names another model (a GPT with QK layernorm, RMSNorm,
rotary positions and untied embeddings, ``tests.agents.providers:qk_norm_gpt``) train that model under
a real agent at DP2: the loss falls, and the checkpoint they save through ``dist_checkpointing`` holds
the provider's weights (the per-head query and key norms the built-in GPT does not have)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from torch.distributed.checkpoint import FileSystemReader

from agents.testing import TestCoordinator, spawn_agent, stop_agent
from controlplane.core.recipe.model import ModelSection
from tests.agents.helpers import TINY, launch, start_command

pytestmark = pytest.mark.slow

PROVIDER = "tests.agents.providers:qk_norm_gpt"


async def test_dp2_workers_train_the_providers_model_and_checkpoint_it(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    agent = await spawn_agent(coordinator.url, "byom", 2, tmp_path / "agent")
    ckpt = tmp_path / "ckpt"
    section = ModelSection(
        num_layers=TINY.layers,
        hidden_size=TINY.hidden,
        num_attention_heads=TINY.heads,
        seq_length=TINY.seq_len,
        vocab_size=TINY.vocab,
        provider=PROVIDER,
    )
    try:
        await coordinator.wait_for(lambda: coordinator.messages("hello", "byom"), 20)
        wl = launch(dp=2, iterations=40).model_copy(
            update={"architecture": section, "checkpoint_dir": str(ckpt), "checkpoint_interval": 40}
        )
        assert (await coordinator.command("byom", start_command("byom", 1, wl, "s1"))).outcome == "done"
        await coordinator.wait_for(lambda: len(coordinator.reports("exited")) >= 2, 120)

        exits = [r.event for _, r in coordinator.reports("exited")]
        assert [(e.exit_code, e.expected) for e in exits] == [(0, True), (0, True)]  # type: ignore[union-attr]
        assert coordinator.reports("exception") == []
        stats = sorted(
            (r.event for _, r in coordinator.reports("iteration_stats") if r.rank == 0),
            key=lambda s: s.first_iteration,  # type: ignore[union-attr]
        )
        losses = [s.loss for s in stats if s.loss is not None]  # type: ignore[union-attr]
        assert len(losses) >= 2
        # it learns the synthetic sequences: an untrained model is at ln(128) = 4.85. (The first and
        # last reporting intervals' means: how many iterations each covers depends on the host's speed,
        # so only the last interval is held to a level and the first to being higher.)
        assert losses[-1] < math.log(128) - 1.0, losses
        assert losses[0] > losses[-1], losses

        keys = set(FileSystemReader(str(ckpt / "iter_0000039")).read_metadata().state_dict_metadata)
        assert any("q_layernorm" in k for k in keys), sorted(keys)[:20]
        assert any("k_layernorm" in k for k in keys)
        assert any("output_layer.weight" in k for k in keys)  # untied: its own output weight
        assert not any("position_embeddings" in k for k in keys)  # rotary: no position table
    finally:
        await stop_agent(agent)
        await agent.wait()
