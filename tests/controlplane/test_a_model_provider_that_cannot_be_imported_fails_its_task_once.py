"""A recipe's ``model.provider`` is user code the control plane never imports: at submit only its form is
checked (``package.module:function``; anything else is refused naming ``recipe.model.provider``). On the
worker a provider that cannot be imported, is not callable or builds no Megatron-Core module raises
``ProviderError`` naming ``model.provider``; that report fails the task once — no restart, no retry
elsewhere — with the worker's reason in the operator alert, and neither the device nor the node is
blamed (every node would fail the same way)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import transaction
from rest_framework.test import APIClient

from agents.training.provider import ProviderContext, ProviderError, build_model, resolve_provider
from controlplane.apps.fleet.models import AgentCommand, Device, Node
from controlplane.apps.incidents.models import Alert, FailureEvent
from controlplane.apps.incidents.reports import record_failure_report
from controlplane.apps.planning.handling import handle_failure
from controlplane.apps.planning.models import Transition
from controlplane.apps.planning.replan import replan
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.core.protocol import WorkerReport
from controlplane.core.protocol.messages import WorkerEvent, WorkerException, WorkerExited
from tests.controlplane.factories import NodeFactory, TaskFactory

MISSING = "tests.agents.no_such_providers:gpt"
EXIT_EXCEPTION = 17  # agents.training.hook.EXIT_EXCEPTION: the hook's exit after forwarding an exception


def recipe(provider: str) -> dict[str, Any]:
    return {
        "version": 1,
        "model": {
            "num_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "seq_length": 32,
            "vocab_size": 128,
            "provider": provider,
        },
        "schedule": {"lr": 1e-3},
        "train_iterations": 20,
        "global_batch_size": 8,
        "micro_batch_size": 2,
    }


@pytest.mark.parametrize("provider", ["tests.agents.providers", "not a path", "pkg.mod:fn:x", "1pkg:fn"])
def test_a_provider_that_is_no_import_path_is_refused_at_submit_naming_the_field(
    cluster: list[Node], operator_client: APIClient, provider: str
) -> None:
    response = operator_client.post(
        "/api/v1/tasks/", {"name": "bad", "recipe": recipe(provider)}, format="json"
    )
    assert response.status_code == 400, response.json()
    assert "recipe.model.provider" in response.json(), response.json()
    assert not TrainingTask.objects.exists()


def test_an_import_path_is_accepted_at_submit_without_importing_it(
    cluster: list[Node], operator_client: APIClient
) -> None:
    response = operator_client.post(
        "/api/v1/tasks/", {"name": "byom", "recipe": recipe(MISSING)}, format="json"
    )
    assert response.status_code == 201, response.json()
    task = TrainingTask.objects.get()
    assert task.recipe["model"]["provider"] == MISSING


def test_the_worker_refuses_a_provider_it_cannot_use_naming_the_field() -> None:
    refusals = {
        MISSING: r"^model\.provider: cannot import 'tests\.agents\.no_such_providers' \(ModuleNotFound",
        "tests.agents.providers:gpt": r"^model\.provider: module 'tests\.agents\.providers' has no 'gpt'",
        "tests.agents.providers:NOT_CALLABLE": r"^model\.provider: tests\.agents\.providers:NOT_CALLABLE "
        r"is not callable \(a int\)",
    }
    for path, refusal in refusals.items():
        with pytest.raises(ProviderError, match=refusal):
            resolve_provider(path)

    from megatron.core.transformer import TransformerConfig

    ctx = ProviderContext(
        section=None,
        config=TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=2),
        pre_process=True,
        post_process=True,
        vocab_size=16,
        seq_length=4,
    )
    with pytest.raises(
        ProviderError, match=r"returned a torch\.nn\.modules\.linear\.Linear, not a Megatron-Core"
    ):
        build_model("tests.agents.providers:not_a_module", ctx)


def _report(task: TrainingTask, rank: int, detector: str, event: WorkerEvent) -> WorkerReport:
    now = datetime.now(UTC)
    return WorkerReport(
        report_id=str(uuid.uuid4()),
        task_id=str(task.pk),
        epoch=task.epoch,
        rank=rank,
        device=rank,
        detector=detector,
        occurred_at=now,
        detected_at=now,
        event=event,
    )


def running_task() -> TrainingTask:
    NodeFactory(devices=2)
    task = TaskFactory(min_workers=2, max_workers=2)
    with transaction.atomic():
        replan("task_submitted")
    Transition.objects.filter(task=task).update(state="completed")
    TrainingTask.objects.filter(pk=task.pk).update(state="running")
    task.refresh_from_db()
    return task


def test_the_workers_report_fails_the_task_once_with_its_reason(db: None) -> None:
    task = running_task()
    node = Node.objects.get()
    with pytest.raises(ProviderError) as refused:
        resolve_provider(MISSING)
    # what every rank's hook sends (agents.training.hook.report_exception), then the exit
    for rank in (0, 1):
        raised = WorkerException(
            exc_type="agents.training.provider.ProviderError", message=str(refused.value), traceback=""
        )
        record_failure_report(node.pk, _report(task, rank, "exception_propagation", raised))
        exited = WorkerExited(exit_code=EXIT_EXCEPTION, expected=False)
        record_failure_report(node.pk, _report(task, rank, "process_supervision", exited))
    events = list(FailureEvent.objects.filter(task=task).order_by("pk"))
    assert [(e.kind, e.action) for e in events if e.detector == "exception_propagation"] == [
        ("recipe_unusable", "fail_task")
    ] * 2

    outcomes = [handle_failure(e.pk).note for e in events]

    assert outcomes[0].startswith(f"task {task.pk} failed: model.provider: cannot import"), outcomes
    assert all(o == "already handled" for o in outcomes[1:]), outcomes
    task.refresh_from_db()
    assert task.state == "failed"
    assert task.finished_at is not None
    assert not Transition.objects.filter(task=task, epoch__gt=task.epoch).exists()  # no restart
    assert not Transition.objects.filter(task=task, kind__in=("restart", "retry")).exists()
    assert not Allocation.objects.filter(task=task, active=True).exists()
    assert all(e.resolved_at is not None for e in FailureEvent.objects.filter(task=task))
    [alert] = Alert.objects.filter(message__startswith=f"Task {task.name} (#{task.pk}) failed")
    assert "model.provider: cannot import 'tests.agents.no_such_providers'" in alert.message
    stop = AgentCommand.objects.get(node=node, task=task, type="stop_workers")
    assert stop.payload["task_ended"] is True
    # the recipe's fault, not the hardware's
    node.refresh_from_db()
    assert node.state != "isolated"
    assert [(d.error_count, d.sev2_count, d.sev1_count) for d in Device.objects.filter(node=node)] == [
        (0, 0, 0),
        (0, 0, 0),
    ]
