"""Services broadcast their live events after the transaction commits, never for a rolled-back change."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from controlplane.apps.common import broadcast
from controlplane.apps.training.models import TrainingTask
from controlplane.apps.training.services import do_change_weight
from tests.controlplane.factories import TaskFactory


class Boom(Exception):
    pass


def _change_weight_then_fail(task: TrainingTask) -> None:
    with transaction.atomic():
        do_change_weight(None, task, 2.0)
        raise Boom


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    monkeypatch.setattr(broadcast, "_send", events.append)
    return events


def test_the_event_follows_the_commit(
    db: None, sent: list[dict[str, Any]], django_capture_on_commit_callbacks: Any
) -> None:
    task = TaskFactory(weight=1.0)

    with django_capture_on_commit_callbacks(execute=True):
        do_change_weight(None, task, 2.0)
        assert sent == []  # not before the commit

    assert [e["kind"] for e in sent] == ["task.weight_changed"]
    assert sent[0]["payload"]["weight"] == 2.0


def test_a_rolled_back_change_sends_nothing(
    db: None, sent: list[dict[str, Any]], django_capture_on_commit_callbacks: Any
) -> None:
    task = TaskFactory(weight=1.0)

    with django_capture_on_commit_callbacks(execute=True), pytest.raises(Boom):
        _change_weight_then_fail(task)

    assert sent == []
    assert TrainingTask.objects.get(pk=task.pk).weight == 1.0
