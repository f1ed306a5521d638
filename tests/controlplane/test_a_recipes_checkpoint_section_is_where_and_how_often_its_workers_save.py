"""The recipe's checkpoint section is the task's: its workers are launched with the section's directory,
interval and number kept (a recipe without one checkpoints as the deployment says), and after a save
only the ``keep`` newest checkpoints stay on disk."""

from __future__ import annotations

from pathlib import Path

from django.db import transaction
from django.test import override_settings

from controlplane.apps.fleet.models import AgentCommand
from controlplane.apps.fleet.outbox import command_message
from controlplane.apps.planning.replan import replan
from controlplane.apps.training.models import TrainingTask
from controlplane.apps.training.selectors import get_task_recipe
from controlplane.core.protocol import StartWorkersCommand
from controlplane.core.transitions.checkpoints import checkpoint_dir, mark_latest, prune, saved_iterations
from tests.controlplane.factories import NodeFactory, TaskFactory


def _launch(task: TrainingTask) -> StartWorkersCommand:
    row = AgentCommand.objects.filter(task=task, type="start_workers").first()
    assert row is not None
    message = command_message(row)
    assert isinstance(message, StartWorkersCommand)
    return message


@override_settings(UNICRON_CHECKPOINT_ROOT="/deployment/ckpt", UNICRON_CHECKPOINT_INTERVAL=25)
def test_the_launch_takes_the_recipes_checkpoint_section(db: None) -> None:
    NodeFactory(devices=2)
    with_section = TaskFactory(min_workers=1, max_workers=1)
    recipe = get_task_recipe(with_section).model_dump(mode="json")
    recipe["checkpoint"] = {"directory": "/shared/ckpt/mine", "interval": 7, "keep": 3}
    TrainingTask.objects.filter(pk=with_section.pk).update(recipe=recipe)
    without = TaskFactory(name="plain", min_workers=1, max_workers=1)
    with transaction.atomic():
        replan("task_submitted")

    mine = _launch(with_section).launch
    assert (mine.checkpoint_dir, mine.checkpoint_interval, mine.checkpoint_keep) == (
        "/shared/ckpt/mine",
        7,
        3,
    )
    plain = _launch(without).launch
    assert (plain.checkpoint_dir, plain.checkpoint_interval, plain.checkpoint_keep) == (
        f"/deployment/ckpt/task-{without.pk}",
        25,
        0,
    )


def test_prune_keeps_the_newest_up_to_the_marked_one(tmp_path: Path) -> None:
    for it in (9, 19, 29, 39):
        checkpoint_dir(tmp_path, it).mkdir()
    mark_latest(tmp_path, 29)  # 39 is still being written: never pruned

    assert prune(tmp_path, 2) == [9]
    assert saved_iterations(tmp_path) == [19, 29, 39]
    assert prune(tmp_path, 2) == []
