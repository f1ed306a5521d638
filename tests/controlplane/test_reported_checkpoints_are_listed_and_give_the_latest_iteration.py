from __future__ import annotations

from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.apps.fleet.models import Node
from controlplane.apps.training.models import Checkpoint, TrainingTask
from controlplane.apps.training.selectors import latest_checkpoint_iteration
from controlplane.core.protocol import CheckpointSaved, WorkerReport
from controlplane.live.agent_link import report_handler
from tests.controlplane.factories import TaskFactory


def saved(task: TrainingTask, iteration: int, rank: int = 0, loss: float | None = None) -> WorkerReport:
    now = timezone.now()
    return WorkerReport(
        report_id=f"ckpt-{iteration}-{rank}",
        task_id=str(task.pk),
        epoch=task.epoch,
        rank=rank,
        device=rank,
        detector=None,
        occurred_at=now,
        detected_at=now,
        event=CheckpointSaved(
            iteration=iteration,
            path=f"/shared/ckpt/{task.name}/iter_{iteration:07d}",
            size_bytes=1000 + iteration,
            validation_loss=loss,
        ),
    )


def test_checkpoint_reports_are_recorded_once_and_listed_newest_first(
    cluster: list[Node], viewer_client: APIClient
) -> None:
    task = TaskFactory(state="running")
    assert latest_checkpoint_iteration(task) is None
    node_id = cluster[0].pk

    for report in (saved(task, 100, loss=5.5), saved(task, 200, loss=4.75), saved(task, 200, rank=1)):
        report_handler(report)(node_id, report)

    assert Checkpoint.objects.filter(task=task).count() == 2
    assert latest_checkpoint_iteration(task) == 200
    body = viewer_client.get(f"/api/v1/tasks/{task.pk}/checkpoints/").json()
    assert [c["iteration"] for c in body] == [200, 100]
    assert body[0]["path"] == f"/shared/ckpt/{task.name}/iter_0000200"
    assert body[0]["size_bytes"] == 1200
    assert body[0]["validation_loss"] == 4.75
    assert body[0]["rank"] == 0


def test_a_checkpoint_of_an_unknown_task_is_not_recorded(cluster: list[Node]) -> None:
    task = TaskFactory()
    report = saved(task, 100)
    task.delete()

    assert "unknown task" in report_handler(report)(cluster[0].pk, report)
    assert not Checkpoint.objects.exists()
