"""Edits made in the admin leave audit rows like API actions do: who changed which fields of what, from
what to what (a task's weight, a command's payload), and deletions; passwords never enter the trail."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.db import models
from django.forms import MultiWidget
from django.test import Client

from controlplane.apps.accounts.models import AuditEntry
from controlplane.apps.fleet.models import AgentCommand
from controlplane.apps.training.models import TrainingTask
from tests.controlplane.factories import NodeFactory, TaskFactory


@pytest.fixture
def root(db: None) -> tuple[Client, User]:
    user = User.objects.create_superuser("root", password="unused-here")
    client = Client()
    client.force_login(user)
    return client, user


def _change_form_data(client: Client, obj: models.Model, **changes: Any) -> dict[str, Any]:
    """The admin change form's current values (inline formsets empty and unchanged), with ``changes``."""
    model_admin = admin.site._registry[type(obj)]
    request = client.get("/admin/").wsgi_request
    form = model_admin.get_form(request, obj, change=True)(instance=obj)
    data: dict[str, Any] = {}
    for name in form.fields:
        value = form[name].value()
        widget = form.fields[name].widget
        if isinstance(widget, MultiWidget):  # split date and time
            data.update({f"{name}_{i}": v for i, v in enumerate(widget.decompress(value)) if v is not None})
        elif isinstance(value, bool):
            if value:
                data[name] = "on"
        elif value is not None:
            data[name] = json.dumps(value) if isinstance(value, dict) else value  # JSON fields
    for inline in model_admin.get_inline_instances(request, obj):
        formset = inline.get_formset(request, obj)(instance=obj)
        data.update({f"{formset.prefix}-{k}": v for k, v in formset.management_form.initial.items()})
        for i, sub in enumerate(formset.forms):
            for name in sub.fields:
                value = sub[name].value()
                if value is not None and value is not False:
                    data[f"{formset.prefix}-{i}-{name}"] = "on" if value is True else value
    data.update(changes)
    return data


def test_a_weight_edited_in_the_admin_is_audited(root: tuple[Client, User]) -> None:
    client, user = root
    task = TaskFactory(weight=1.0)

    response = client.post(
        f"/admin/training/trainingtask/{task.pk}/change/", _change_form_data(client, task, weight="7.5")
    )

    assert response.status_code == 302, response.context["adminform"].form.errors if response.context else ""
    assert TrainingTask.objects.get(pk=task.pk).weight == 7.5
    entry = AuditEntry.objects.get(verb="admin_change", object_type="training.trainingtask")
    assert (entry.actor, entry.object_id) == (user, str(task.pk))
    assert (entry.before, entry.after) == ({"weight": 1.0}, {"weight": 7.5})


def test_a_command_payload_edited_in_the_admin_is_audited(root: tuple[Client, User]) -> None:
    client, _ = root
    command = AgentCommand.objects.create(node=NodeFactory(), type="stop_workers", payload={"task": 1})

    response = client.post(
        f"/admin/fleet/agentcommand/{command.pk}/change/",
        _change_form_data(client, command, payload='{"task": 2}'),
    )

    assert response.status_code == 302
    entry = AuditEntry.objects.get(verb="admin_change", object_type="fleet.agentcommand")
    assert (entry.before, entry.after) == ({"payload": {"task": 1}}, {"payload": {"task": 2}})


def test_a_deletion_in_the_admin_is_audited(root: tuple[Client, User]) -> None:
    client, _ = root
    task = TaskFactory(name="doomed")

    response = client.post(f"/admin/training/trainingtask/{task.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    entry = AuditEntry.objects.get(verb="admin_delete")
    assert entry.before["name"] == "doomed"


def test_a_password_changed_in_the_admin_never_enters_the_trail(root: tuple[Client, User]) -> None:
    client, _ = root
    other = User.objects.create_user("someone", password="first-password-123")

    response = client.post(
        f"/admin/auth/user/{other.pk}/change/",
        _change_form_data(client, other, first_name="Some"),
    )
    password = client.post(
        f"/admin/auth/user/{other.pk}/password/",
        {"password1": "second-password-456", "password2": "second-password-456", "usable_password": "true"},
    )

    assert response.status_code == 302, response.context["adminform"].form.errors
    assert password.status_code == 302
    entry = AuditEntry.objects.get(verb="admin_change", object_type="auth.user")
    assert (entry.before["first_name"], entry.after["first_name"]) == ("", "Some")
    assert "password" not in entry.before
    assert "password" not in entry.after
    set_password = AuditEntry.objects.get(verb="admin_set_password")
    assert set_password.object_id == str(other.pk)
    other.refresh_from_db()
    assert other.password[:20] not in str(list(AuditEntry.objects.values()))
