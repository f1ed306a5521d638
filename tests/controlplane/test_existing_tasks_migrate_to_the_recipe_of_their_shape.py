from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from controlplane.core.planning import GPTSpec
from controlplane.core.recipe import recipe_for_spec, recipe_from_mapping

migration = importlib.import_module("controlplane.apps.training.migrations.0005_trainingtask_recipe")


def test_the_migrated_recipe_is_valid_and_is_the_one_a_shape_submission_gets() -> None:
    task = SimpleNamespace(
        num_layers=4,
        hidden_size=256,
        num_attention_heads=8,
        seq_length=512,
        vocab_size=32000,
        global_batch_size=32,
        micro_batch_size=4,
        total_iterations=1000,
    )

    migrated = recipe_from_mapping(migration.shape_recipe(task))

    submitted = recipe_for_spec(GPTSpec(4, 256, 8, 512, 32000, 32, 4), 1000)
    assert migrated == submitted
    assert migrated.data is None
    assert migrated.to_spec() == GPTSpec(4, 256, 8, 512, 32000, 32, 4)


@pytest.mark.django_db(transaction=True)
def test_a_task_stored_before_recipes_gets_one_when_the_database_migrates() -> None:
    executor = MigrationExecutor(connection)
    before, after = (
        [("training", "0004_trainingtask_snapshot_secret")],
        [("training", "0005_trainingtask_recipe")],
    )
    try:
        executor.migrate(before)
        old = executor.loader.project_state(before).apps.get_model("training", "TrainingTask")
        pk = old.objects.create(
            name="old",
            num_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            seq_length=32,
            vocab_size=128,
            global_batch_size=8,
            micro_batch_size=2,
            total_iterations=40,
        ).pk
        executor = MigrationExecutor(connection)
        executor.migrate(after)
        new = executor.loader.project_state(after).apps.get_model("training", "TrainingTask")
        recipe = recipe_from_mapping(new.objects.get(pk=pk).recipe)
        assert recipe == recipe_for_spec(GPTSpec(2, 64, 4, 32, 128, 8, 2), 40)
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
