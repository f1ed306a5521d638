"""A task's weight is at most MAX_TASK_WEIGHT (1000): 1e308 used to be accepted, and the cluster-WAF
sampler then failed on an overflow. The API (submit, change weight) and the admin refuse it and
nothing changes."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth.models import User
from django.test import RequestFactory
from rest_framework.test import APIClient

from controlplane.apps.accounts.models import AuditEntry
from controlplane.apps.training.api.serializers import MAX_TASK_WEIGHT
from controlplane.apps.training.models import TrainingTask
from tests.controlplane.factories import TaskFactory
from tests.controlplane.task_specs import assert_nothing_stored, valid_spec


def test_submitting_a_task_with_weight_1e308_is_refused(db: None, operator_client: APIClient) -> None:
    response = operator_client.post("/api/v1/tasks/", valid_spec(weight=1e308), format="json")

    assert response.status_code == 400
    assert "weight" in response.json()
    assert_nothing_stored()


def test_the_maximum_weight_itself_is_accepted(cluster: object, operator_client: APIClient) -> None:
    response = operator_client.post("/api/v1/tasks/", valid_spec(weight=MAX_TASK_WEIGHT), format="json")

    assert response.status_code == 201, response.json()


def test_changing_a_weight_above_the_maximum_is_refused(db: None, operator_client: APIClient) -> None:
    task = TaskFactory(weight=2.0, state="running")

    response = operator_client.post(
        f"/api/v1/tasks/{task.pk}/change-weight/", {"weight": MAX_TASK_WEIGHT * 1.5}, format="json"
    )

    assert response.status_code == 400
    assert str(int(MAX_TASK_WEIGHT)) in str(response.json()["weight"])
    assert TrainingTask.objects.get(pk=task.pk).weight == 2.0
    assert not AuditEntry.objects.filter(verb="change_weight").exists()


def test_the_admin_refuses_a_weight_above_the_maximum(db: None) -> None:
    task = TaskFactory(weight=2.0)
    request = RequestFactory().get("/admin/")
    request.user = User.objects.create_superuser("root", password="unused-here")
    model_admin = admin.site._registry[TrainingTask]
    form_class = model_admin.get_form(request, task, change=True)
    form = form_class(data={**_form_data(form_class, task), "weight": "1e308"}, instance=task)

    assert not form.is_valid()
    assert "weight" in form.errors
    assert TrainingTask.objects.get(pk=task.pk).weight == 2.0


def _form_data(form_class: type, task: TrainingTask) -> dict[str, object]:
    form = form_class(instance=task)
    return {name: form[name].value() for name in form.fields if form[name].value() is not None}
