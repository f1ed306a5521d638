from __future__ import annotations

import json

from controlplane.apps.training.models import TrainingTask
from tests.cli.harness import Cli
from tests.controlplane.factories import NodeFactory


def test_a_task_goes_through_submit_list_show_weight_and_cancel(cli: Cli) -> None:
    NodeFactory(devices=8)
    spec = cli.write_spec("gpt-cli-life", total_iterations=500)

    submitted = cli.as_user("tasks", "submit", "-f", str(spec), "-o", "json")

    assert submitted.returncode == 0, submitted.stderr
    task = json.loads(submitted.stdout)
    stored = TrainingTask.objects.get(pk=task["id"])
    assert (stored.name, stored.total_iterations, stored.owner.username) == ("gpt-cli-life", 500, "ops")

    listed = cli.as_user("tasks", "list", "--state", "pending", "--name", "cli-life")
    assert listed.returncode == 0, listed.stderr
    assert "gpt-cli-life" in listed.stdout
    assert "pending" in listed.stdout
    assert "0/500" in listed.stdout
    assert "gpt-cli-life" not in cli.as_user("tasks", "list", "--state", "running").stdout

    shown = cli.as_user("tasks", "show", str(task["id"]))
    assert shown.returncode == 0, shown.stderr
    assert "gpt-cli-life" in shown.stdout
    assert "4 layers, hidden 256" in shown.stdout

    reweighted = cli.as_user("tasks", "weight", str(task["id"]), "3.5")
    assert reweighted.returncode == 0, reweighted.stderr
    assert f"Reweighted task {task['id']} gpt-cli-life" in reweighted.stdout
    assert TrainingTask.objects.get(pk=task["id"]).weight == 3.5

    cancelled = cli.as_user("tasks", "cancel", str(task["id"]), "-o", "json")
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["state"] == "cancelled"
    assert TrainingTask.objects.get(pk=task["id"]).state == "cancelled"

    again = cli.as_user("tasks", "cancel", str(task["id"]))
    assert again.returncode == 1
    assert f"Task {task['id']} is cancelled and cannot be cancelled." in again.stderr  # the API's words


def test_submit_reads_a_json_spec_from_standard_input(cli: Cli) -> None:
    NodeFactory(devices=8)
    spec = {
        "name": "gpt-stdin",
        "num_layers": 4,
        "hidden_size": 256,
        "num_attention_heads": 8,
        "seq_length": 512,
        "vocab_size": 32000,
        "global_batch_size": 32,
        "micro_batch_size": 4,
    }

    result = cli.as_user("tasks", "submit", "-f", "-", input=json.dumps(spec))

    assert result.returncode == 0, result.stderr
    assert "Submitted task" in result.stdout
    assert "gpt-stdin" in result.stdout
    assert TrainingTask.objects.filter(name="gpt-stdin").count() == 1
