"""Every task gets a recipe: existing tasks' model spec columns become the recipe's model section, with
the optimizer and schedule the worker trained them with (Adam, constant learning rate 1e-3) and
synthetic data (no data section)."""

from typing import Any

from django.db import migrations, models


def shape_recipe(task: Any) -> dict[str, Any]:
    return {
        "version": 1,
        "model": {
            "num_layers": task.num_layers,
            "hidden_size": task.hidden_size,
            "num_attention_heads": task.num_attention_heads,
            "seq_length": task.seq_length,
            "vocab_size": task.vocab_size,
        },
        "optimizer": {"name": "adam", "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01},
        "schedule": {"lr": 1e-3, "min_lr": 1e-3, "decay_style": "constant"},
        "global_batch_size": task.global_batch_size,
        "micro_batch_size": task.micro_batch_size,
        "train_iterations": task.total_iterations,
    }


def give_every_task_a_recipe(apps: Any, schema_editor: Any) -> None:
    TrainingTask = apps.get_model("training", "TrainingTask")
    for task in TrainingTask.objects.filter(recipe={}).iterator():
        task.recipe = shape_recipe(task)
        task.save(update_fields=["recipe"])


class Migration(migrations.Migration):
    dependencies = [
        ("training", "0004_trainingtask_snapshot_secret"),
    ]

    operations = [
        migrations.AddField(
            model_name="trainingtask",
            name="recipe",
            field=models.JSONField(
                default=dict,
                help_text="The validated training recipe (controlplane.core.recipe, docs/DATA.md); the model "
                "spec fields above are its model section and batch, kept as columns for the planner's queries.",
            ),
        ),
        migrations.RunPython(give_every_task_a_recipe, migrations.RunPython.noop),
    ]
