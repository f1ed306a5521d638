"""A recipe whose dataset path does not exist on the node passes the submit check (the control plane
never reads the nodes' files); the worker's ``DatasetError`` names the field and the path, and that
report fails the task once with the reason in the operator's alert, blaming neither node nor device."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.data.prepare import byte_level_bpe
from agents.training.dataset import DatasetError, build_datasets
from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.incidents.models import Alert, FailureEvent
from controlplane.apps.incidents.reports import record_failure_report
from controlplane.apps.planning.handling import handle_failure
from controlplane.apps.planning.models import Transition
from controlplane.core.protocol.messages import WorkerException, WorkerExited
from controlplane.core.recipe import DataSection
from tests.controlplane.test_a_model_provider_that_cannot_be_imported_fails_its_task_once import (
    EXIT_EXCEPTION,
    _report,
    running_task,
)


def test_a_missing_dataset_fails_the_task_with_the_field_and_the_path(db: None, tmp_path: Path) -> None:
    byte_level_bpe(300, iter(["a tiny tokenizer"] * 10)).save(str(tmp_path / "tokenizer.json"))
    missing = tmp_path / "nowhere" / "pydoc"
    data = DataSection(
        tokenizer=str(tmp_path / "tokenizer.json"),
        blend=[{"path_prefix": str(missing)}],  # type: ignore[list-item]
        split="98,2,0",
    )
    with pytest.raises(DatasetError) as refused:
        build_datasets(
            data, seq_length=16, seed=1, train_samples=10, valid_samples=0, cache_dir=tmp_path / "cache"
        )
    reason = (
        f"data.blend.0.path_prefix: no indexed dataset at {missing} ({missing}.bin, {missing}.idx not found)"
    )
    assert str(refused.value) == reason

    task = running_task()
    node = Node.objects.get()
    for rank in (0, 1):  # what every rank's hook sends, then its exit
        raised = WorkerException(
            exc_type="agents.training.dataset.DatasetError", message=str(refused.value), traceback=""
        )
        record_failure_report(node.pk, _report(task, rank, "exception_propagation", raised))
        exited = WorkerExited(exit_code=EXIT_EXCEPTION, expected=False)
        record_failure_report(node.pk, _report(task, rank, "process_supervision", exited))
    events = list(FailureEvent.objects.filter(task=task).order_by("pk"))
    assert [(e.kind, e.severity, e.action) for e in events if e.detector == "exception_propagation"] == [
        ("recipe_unusable", "sev2", "fail_task")
    ] * 2

    outcomes = [handle_failure(e.pk).note for e in events]

    assert outcomes[0] == f"task {task.pk} failed: {reason}", outcomes
    task.refresh_from_db()
    assert task.state == "failed"
    assert not Transition.objects.filter(task=task, kind__in=("restart", "retry")).exists()
    [alert] = Alert.objects.filter(message__startswith=f"Task {task.name} (#{task.pk}) failed")
    assert alert.message == f"Task {task.name} (#{task.pk}) failed: {reason}"
    assert alert.severity == "sev2"
    node.refresh_from_db()
    assert node.state != "isolated"
    assert all(d.error_count == 0 for d in Device.objects.filter(node=node))
