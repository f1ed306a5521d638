from __future__ import annotations

from pathlib import Path

from controlplane.apps.training.models import TrainingTask
from tests.cli.harness import Cli
from tests.controlplane.factories import NodeFactory

EXAMPLE = Path(__file__).resolve().parents[2] / "agents" / "data" / "recipes" / "tiny-gpt.yaml"
RECIPE = EXAMPLE.read_text().replace("  seq_length: 32\n", "  seq_length: 32\n  vocab_size: 2048\n")


def test_a_recipe_file_becomes_a_task_with_that_recipe(cli: Cli) -> None:
    NodeFactory(devices=8)
    path = cli.write_spec("tiny-gpt", text=RECIPE)

    result = cli.as_user("tasks", "submit", "--recipe", str(path), "--max-workers", "2")

    assert result.returncode == 0, result.stderr
    task = TrainingTask.objects.get()
    assert task.name == path.stem
    assert task.max_workers == 2
    assert task.recipe["schedule"]["lr"] == 3e-3
    assert task.recipe["model"]["vocab_size"] == 2048


def test_a_bad_recipe_exits_1_naming_the_field_and_stores_nothing(cli: Cli) -> None:
    NodeFactory(devices=8)
    path = cli.write_spec("bad", text=RECIPE.replace("num_attention_heads: 4", "num_attention_heads: 5"))

    result = cli.as_user("tasks", "submit", "--recipe", str(path))

    assert result.returncode == 1
    assert "recipe.model.num_attention_heads" in result.stderr, result.stderr
    assert not TrainingTask.objects.exists()
