from __future__ import annotations

import json
import signal
from collections.abc import Callable

import pytest

from controlplane.apps.training.choices import TaskState
from controlplane.apps.training.models import TrainingTask
from controlplane.apps.training.services import (
    TaskSubmission,
    do_cancel_task,
    do_record_progress,
    do_set_task_state,
    do_submit_task,
)
from tests.cli.harness import Background, Cli
from tests.controlplane.factories import NodeFactory


def _submit(total_iterations: int = 100) -> TrainingTask:
    NodeFactory(devices=8)
    submission = TaskSubmission(
        name="gpt-watched",
        num_layers=4,
        hidden_size=256,
        num_attention_heads=8,
        seq_length=512,
        vocab_size=32000,
        global_batch_size=32,
        micro_batch_size=4,
        max_workers=8,
        total_iterations=total_iterations,
    )
    return do_submit_task(None, submission)


def _complete(task: TrainingTask) -> None:
    do_set_task_state(task, TaskState.COMPLETED)


def _fail(task: TrainingTask) -> None:
    do_set_task_state(task, TaskState.FAILED)


def _cancel(task: TrainingTask) -> None:
    do_cancel_task(None, task)


@pytest.mark.parametrize(
    ("end", "state", "code"), [(_complete, "completed", 0), (_fail, "failed", 5), (_cancel, "cancelled", 5)]
)
def test_watch_prints_progress_and_exits_by_the_end_state(
    cli: Cli, end: Callable[[TrainingTask], None], state: str, code: int
) -> None:
    task = _submit(total_iterations=100)
    watch = Background.start(cli, "tasks", "watch", str(task.pk), "--interval", "0.2")
    try:
        watch.wait_for_line(f"task {task.pk} | pending")
        do_set_task_state(task, TaskState.RUNNING, bump_epoch=True)
        do_record_progress(task, 40)
        watch.wait_for_line("iteration 40/100 (40.0%)")
        task.refresh_from_db()
        end(task)

        assert watch.wait() == code, watch.output
    finally:
        watch.stop()
    running = watch.wait_for_line("iteration 40/100")
    assert f"task {task.pk} | running | epoch 1" in running
    assert f"Task {task.pk} {state} at iteration 40" in watch.output


def test_watch_with_json_output_prints_the_task_json_once_per_change(cli: Cli) -> None:
    task = _submit(total_iterations=10)
    watch = Background.start(cli, "tasks", "watch", str(task.pk), "--interval", "0.2", "-o", "json")
    try:
        watch.wait_for_line('"state": "pending"')
        do_set_task_state(task, TaskState.RUNNING)
        do_record_progress(task, 10)
        watch.wait_for_line('"iteration": 10')
        task.refresh_from_db()
        _complete(task)

        assert watch.wait() == 0, watch.output
    finally:
        watch.stop()
    documents = [json.loads(line) for line in watch.seen if line.strip()]
    assert [d["state"] for d in documents] == ["pending", "running", "completed"], watch.output
    assert {d["id"] for d in documents} == {task.pk}


def test_ctrl_c_stops_watching_cleanly_and_leaves_the_task_alone(cli: Cli) -> None:
    task = _submit()
    watch = Background.start(cli, "tasks", "watch", str(task.pk), "--interval", "0.2")
    try:
        watch.wait_for_line(f"task {task.pk} | pending")
        watch.process.send_signal(signal.SIGINT)

        assert watch.wait() == 130, watch.output
    finally:
        watch.stop()
    assert f"Stopped watching task {task.pk}; it keeps running." in watch.output
    assert "Traceback" not in watch.output
    task.refresh_from_db()
    assert task.state == "pending"


def test_watching_a_task_that_does_not_exist_exits_1(cli: Cli) -> None:
    result = cli.as_user("tasks", "watch", "999999")

    assert result.returncode == 1
    assert "refused (HTTP 404)" in result.stderr
