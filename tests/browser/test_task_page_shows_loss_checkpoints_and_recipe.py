"""The task page charts the training and validation loss, lists the checkpoints the agents reported
and shows the task's recipe; new loss samples appear without a reload."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.browser.conftest import assert_not_reloaded, mark_page, services


def _losses(task: Any, start: int) -> None:
    from django.utils import timezone

    from controlplane.apps.metrics.choices import MetricKind
    from controlplane.apps.metrics.services import Sample, do_record_samples

    # a minute apart (the page averages its last 3 hours in 400 buckets of 27 s)
    now = timezone.now()
    samples = [
        Sample(MetricKind.TRAINING_LOSS, 6.0 - 0.1 * i, now - timedelta(minutes=10 - i), task.pk, start + i)
        for i in range(10)
    ]
    samples.append(Sample(MetricKind.VALIDATION_LOSS, 5.5, now - timedelta(seconds=30), task.pk, start + 9))
    do_record_samples(samples)


def _submitted_an_hour_ago(task: Any) -> None:
    from django.utils import timezone

    from controlplane.apps.training.models import TrainingTask

    TrainingTask.objects.filter(pk=task.pk).update(created_at=timezone.now() - timedelta(hours=1))


def _checkpoint(task: Any, iteration: int) -> None:
    from django.utils import timezone

    from controlplane.apps.training.models import Checkpoint

    Checkpoint.objects.create(
        task=task,
        iteration=iteration,
        path=f"/shared/ckpt/{task.name}/iter_{iteration:07d}",
        size_bytes=3 * 1024 * 1024,
        validation_loss=5.5,
        epoch=task.epoch,
        rank=0,
        saved_at=timezone.now(),
    )


def test_loss_chart_checkpoints_and_recipe_on_the_task_page(
    cluster: Any, new_page: Any, live_url: str
) -> None:
    task = cluster.tasks[0]
    services(_submitted_an_hour_ago, task)
    services(_checkpoint, task, 100)
    services(_losses, task, 100)
    page = new_page("viewer")
    page.goto(f"{live_url}/tasks/{task.pk}/")
    page.wait_for_selector("[data-testid=checkpoints] tbody tr")
    mark_page(page)

    row = page.text_content("[data-testid=checkpoints] tbody tr")
    assert "100" in row
    assert "3.0 MiB" in row
    assert f"/shared/ckpt/{task.name}/iter_0000100" in row
    page.wait_for_function(
        "() => { const c = document.querySelector('[data-testid=chart-loss] .chart');"
        " return c && c.dataset.values === '10,1'; }"
    )
    recipe = page.text_content("[data-testid=task-recipe]")
    assert '"num_layers"' in recipe
    assert '"schedule"' in recipe

    services(_losses, task, 200)
    page.wait_for_function(
        "() => document.querySelector('[data-testid=chart-loss] .chart').dataset.values === '20,2'"
    )
    assert_not_reloaded(page)
