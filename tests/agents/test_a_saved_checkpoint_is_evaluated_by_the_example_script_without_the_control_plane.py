"""A checkpoint that real Megatron-Core workers saved with tensor parallelism 2 is loaded by
``docs/examples/evaluate_checkpoint.py`` (one process, TP = PP = 1, no control plane): its loss on
the corpus's text is below a uniform guess and it generates text; a missing checkpoint, a recipe
whose model does not match and a missing tokenizer are refused in one line."""

from __future__ import annotations

import ast
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from agents.data.corpus import write_corpus
from agents.data.prepare import prepare
from agents.testing import TestCoordinator, spawn_agent, stop_agent
from controlplane.core.protocol import ModelSpec
from controlplane.core.recipe import Recipe, recipe_from_mapping
from tests.agents.helpers import REPO, launch, start_command

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

SCRIPT = REPO / "docs" / "examples" / "evaluate_checkpoint.py"
VOCAB = 512
ITERATIONS, INTERVAL = 60, 30


def recipe_document(root: Path, hidden_size: int = 64) -> dict[str, object]:
    return {
        "version": 1,
        "model": {
            "num_layers": 2,
            "hidden_size": hidden_size,
            "num_attention_heads": 4,
            "seq_length": 32,
            "vocab_size": VOCAB,
        },
        "data": {
            "tokenizer": str(root / "tokenizer.json"),
            "blend": [{"path_prefix": str(root / "pydoc")}],
            "split": "100,0,0",
        },
        "schedule": {"lr": 3e-3, "min_lr": 3e-4, "warmup_iterations": 5},
        "checkpoint": {"directory": str(root / "checkpoints"), "interval": INTERVAL},
        "train_iterations": ITERATIONS,
        "global_batch_size": 8,
        "micro_batch_size": 2,
    }


def evaluate(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


async def train(coordinator: TestCoordinator, recipe: Recipe, agent_dir: Path) -> None:
    """Run the recipe on one agent at TP2 (two ranks) until its workers exit, saving checkpoints."""
    assert recipe.checkpoint is not None
    m = recipe.model
    model = ModelSpec(
        layers=m.num_layers,
        hidden=m.hidden_size,
        heads=m.num_attention_heads,
        seq_len=m.seq_length,
        vocab=VOCAB,
        micro_batch=recipe.micro_batch_size,
        global_batch=recipe.global_batch_size,
    )
    wl = launch(tp=2, dp=1, iterations=recipe.iterations, model=model).model_copy(
        update={
            "data": recipe.data,
            "optimizer": recipe.optimizer,
            "schedule": recipe.schedule,
            "architecture": m,
            "seed": recipe.seed,
            "checkpoint_dir": recipe.checkpoint.directory,
            "checkpoint_interval": recipe.checkpoint.interval,
        }
    )
    agent = await spawn_agent(coordinator.url, "modelout", 2, agent_dir)
    try:
        await coordinator.wait_for(lambda: coordinator.messages("hello", "modelout"), 20)
        command = start_command("modelout", 1, wl, "s1")
        assert (await coordinator.command("modelout", command)).outcome == "done"
        await coordinator.wait_for(lambda: len(coordinator.reports("exited")) >= 2, 240)
        exits = [r.event for _, r in coordinator.reports("exited")]
        assert [(e.exit_code, e.expected) for e in exits] == [(0, True)] * 2, exits  # type: ignore[union-attr]
    finally:
        await stop_agent(agent)
        await agent.wait()


async def test_a_tp2_checkpoint_is_evaluated_and_generates_text(
    coordinator: TestCoordinator, tmp_path: Path
) -> None:
    cache = Path(tempfile.gettempdir()) / "unicron-data" / "task-modelout"
    shutil.rmtree(cache, ignore_errors=True)
    corpus = write_corpus(tmp_path / "corpus", max_bytes=150_000)
    prepare([corpus.path], tmp_path / "pydoc", train_vocab_size=VOCAB, append_eod=True)
    document = recipe_document(tmp_path)
    recipe_file = tmp_path / "recipe.yaml"
    recipe_file.write_text(yaml.safe_dump(document))
    checkpoints = tmp_path / "checkpoints"
    try:
        await train(coordinator, recipe_from_mapping(document), tmp_path / "agent")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    assert (checkpoints / "latest").read_text().strip() == str(ITERATIONS - 1)

    text = "Return the number of items in the list."
    done = evaluate(
        "--recipe", str(recipe_file), "--checkpoint", str(checkpoints), "--text", text, "--generate", "20"
    )

    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert f"iteration {ITERATIONS - 1})" in out, out
    loss = re.search(r"^loss ([0-9.]+) per token over (\d+) tokens, perplexity ([0-9.]+)", out, re.M)
    assert loss is not None, out
    assert float(loss[1]) < math.log(VOCAB), out  # an untrained model is at ln(512) = 6.24
    generated = re.search(r"^generated 20 tokens: (.*)$", out, re.M)
    assert generated is not None, out
    continued = ast.literal_eval(generated[1])
    assert continued.startswith(text), out
    assert len(continued) > len(text), out

    # a model the checkpoint does not hold; an iteration that was not saved; no checkpoint at all
    other = tmp_path / "wider.yaml"
    other.write_text(yaml.safe_dump(recipe_document(tmp_path, hidden_size=128)))
    refused = evaluate("--recipe", str(other), "--checkpoint", str(checkpoints), "--generate", "0")
    assert refused.returncode == 2, refused.stdout + refused.stderr[-3000:]
    assert "does not match the recipe" in refused.stderr, refused.stderr[-3000:]
    assert "(128, 64)" in refused.stderr or "(512, 128)" in refused.stderr, refused.stderr[-3000:]

    missing = evaluate("--recipe", str(recipe_file), "--checkpoint", str(checkpoints), "--iteration", "7")
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1] == (
        f"error: no checkpoint of iteration 7 under {checkpoints} ({checkpoints}/iter_0000007 not found)"
    )
    nowhere = evaluate("--recipe", str(recipe_file), "--checkpoint", str(tmp_path / "nowhere"))
    assert nowhere.returncode == 2
    assert nowhere.stderr.strip().splitlines()[-1] == f"error: no checkpoint directory at {tmp_path}/nowhere"

    (tmp_path / "tokenizer.json").rename(tmp_path / "moved.json")
    untokenized = evaluate("--recipe", str(recipe_file), "--checkpoint", str(checkpoints))
    assert untokenized.returncode == 2
    last_line = untokenized.stderr.strip().splitlines()[-1]
    assert last_line == f"error: tokenizer not found: {tmp_path}/tokenizer.json"
