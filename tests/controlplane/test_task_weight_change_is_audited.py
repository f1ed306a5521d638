from __future__ import annotations

from rest_framework.test import APIClient

from controlplane.apps.accounts.models import AuditEntry
from controlplane.apps.training.models import TrainingTask
from tests.controlplane.factories import TaskFactory


def test_weight_change_records_who_changed_what(db: None, operator_client: APIClient) -> None:
    task = TaskFactory(weight=1.0, state="running")

    response = operator_client.post(f"/api/v1/tasks/{task.pk}/change-weight/", {"weight": 4.0}, format="json")

    assert response.status_code == 200
    assert TrainingTask.objects.get(pk=task.pk).weight == 4.0
    entry = AuditEntry.objects.get(verb="change_weight")
    assert (entry.object_id, entry.before, entry.after) == (str(task.pk), {"weight": 1.0}, {"weight": 4.0})
    assert entry.actor is not None


def test_negative_weight_change_is_refused_and_nothing_changes(db: None, operator_client: APIClient) -> None:
    task = TaskFactory(weight=1.0)

    response = operator_client.post(f"/api/v1/tasks/{task.pk}/change-weight/", {"weight": -1}, format="json")

    assert response.status_code == 400
    assert "weight" in response.json()
    assert TrainingTask.objects.get(pk=task.pk).weight == 1.0
    assert not AuditEntry.objects.filter(verb="change_weight").exists()
