from __future__ import annotations

import json

import httpx

from controlplane.apps.incidents.choices import Severity
from controlplane.apps.incidents.services import do_raise_alert
from tests.cli.harness import Cli
from tests.controlplane.factories import NodeFactory, TaskFactory, TransitionFactory


def test_every_read_command_prints_exactly_what_the_api_answers(cli: Cli) -> None:
    node = NodeFactory(name="gpu-json", devices=2)
    task = TaskFactory(name="gpt-json")
    TransitionFactory(task=task)
    do_raise_alert(Severity.SEV2, "straggler on gpu-json", node=node)
    api = httpx.Client(base_url=cli.server + "/api/v1/", headers={"Authorization": f"Token {cli.token}"})
    commands = {
        ("tasks", "list"): "tasks/",
        ("tasks", "list", "--state", "pending", "--name", "json"): "tasks/?state=pending&name=json",
        ("tasks", "show", str(task.pk)): f"tasks/{task.pk}/",
        ("nodes", "list"): "nodes/",
        ("alerts", "list", "--state", "open"): "alerts/?state=open",
        ("transitions", "list", "--task", str(task.pk)): f"transitions/?task={task.pk}",
        ("whoami",): "me/",
    }

    for args, path in commands.items():
        result = cli.as_user(*args, "--output", "json")
        assert result.returncode == 0, (args, result.stderr)
        assert json.loads(result.stdout) == api.get(path).json(), args
    api.close()
