"""Real workers (DP2 under a real agent) whose recipe names a model provider that cannot be imported each
report one ``ProviderError`` naming ``model.provider`` and the module, and exit with the hook's exception
code: nothing is trained, and the agent starts nothing again by itself (the control plane fails the task,
tests/controlplane/test_a_model_provider_that_cannot_be_imported_fails_its_task_once.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agents.testing import TestCoordinator, spawn_agent, stop_agent
from controlplane.core.recipe.model import ModelSection
from tests.agents.helpers import TINY, launch, start_command

pytestmark = pytest.mark.slow

EXIT_EXCEPTION = 17  # agents.training.hook.EXIT_EXCEPTION


async def test_each_rank_reports_the_provider_error_once_and_exits(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    agent = await spawn_agent(coordinator.url, "byom-bad", 2, tmp_path / "agent")
    section = ModelSection(
        num_layers=TINY.layers,
        hidden_size=TINY.hidden,
        num_attention_heads=TINY.heads,
        seq_length=TINY.seq_len,
        vocab_size=TINY.vocab,
        provider="tests.agents.no_such_providers:gpt",
    )
    try:
        await coordinator.wait_for(lambda: coordinator.messages("hello", "byom-bad"), 20)
        wl = launch(dp=2, iterations=20).model_copy(update={"architecture": section})
        command = start_command("byom-bad", 1, wl, "s1")
        assert (await coordinator.command("byom-bad", command)).outcome == "done"
        await coordinator.wait_for(lambda: len(coordinator.reports("exited")) >= 2, 120)
        await asyncio.sleep(3.0)  # anything the agent would do next

        raised = [r for _, r in coordinator.reports("exception")]
        assert sorted(r.rank for r in raised) == [0, 1]
        for r in raised:
            assert r.event.exc_type == "agents.training.provider.ProviderError"  # type: ignore[union-attr]
            assert r.event.message.startswith(  # type: ignore[union-attr]
                "model.provider: cannot import 'tests.agents.no_such_providers' (ModuleNotFoundError"
            )
        exits = [r.event for _, r in coordinator.reports("exited")]
        assert [(e.exit_code, e.expected) for e in exits] == [(EXIT_EXCEPTION, False)] * 2  # type: ignore[union-attr]
        assert len(coordinator.reports("started")) == 2  # started once each, never again
        assert coordinator.reports("iteration_stats") == []
    finally:
        await stop_agent(agent)
        await agent.wait()
