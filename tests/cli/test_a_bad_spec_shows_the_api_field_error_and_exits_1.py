from __future__ import annotations

from controlplane.apps.training.models import TrainingTask
from tests.cli.harness import SPEC_YAML, Cli
from tests.controlplane.factories import NodeFactory


def test_a_spec_the_api_refuses_exits_1_with_the_api_field_errors(cli: Cli) -> None:
    NodeFactory(devices=8)
    text = SPEC_YAML.format(name="bad", total_iterations=10).replace("num_layers: 4", "num_layers: 0")

    result = cli.as_user("tasks", "submit", "-f", str(cli.write_spec("bad", text=text)))

    assert result.returncode == 1
    assert "refused (HTTP 400)" in result.stderr
    assert "num_layers: Ensure this value is greater than or equal to 1." in result.stderr
    unknown = cli.as_user(
        "tasks", "submit", "-f", str(cli.write_spec("extra", text=text + "learning_rate: 0.1\n"))
    )
    assert unknown.returncode == 1
    assert "learning_rate: Unknown field." in unknown.stderr
    assert not TrainingTask.objects.exists()


def test_a_spec_that_can_never_fit_the_cluster_names_the_problem(cli: Cli) -> None:
    NodeFactory(devices=1)
    text = SPEC_YAML.format(name="too-wide", total_iterations=10) + "min_workers: 4\n"

    result = cli.as_user("tasks", "submit", "-f", str(cli.write_spec("too-wide", text=text)))

    assert result.returncode == 1
    assert "min_workers" in result.stderr, result.stderr
    assert not TrainingTask.objects.exists()


def test_a_file_that_is_not_yaml_is_a_usage_error_and_sends_nothing(cli: Cli) -> None:
    spec = cli.write_spec("broken", text="name: [unclosed\n")

    result = cli.as_user("tasks", "submit", "-f", str(spec))

    assert result.returncode == 2
    assert "is not valid YAML" in result.stderr
    missing = cli.as_user("tasks", "submit", "-f", str(cli.home / "nope.yaml"))
    assert missing.returncode == 2
    assert "cannot read" in missing.stderr
    assert not TrainingTask.objects.exists()
