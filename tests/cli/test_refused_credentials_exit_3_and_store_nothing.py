from __future__ import annotations

from controlplane.apps.accounts.roles import Role
from tests.cli.conftest import MakeToken
from tests.cli.harness import Cli
from tests.controlplane.factories import NodeFactory


def test_login_with_a_wrong_token_exits_3_with_the_api_words_and_stores_nothing(cli: Cli) -> None:
    result = cli.run("login", "--server", cli.server, "--token", "uapi_not-a-token")

    assert result.returncode == 3
    assert "not authorised (HTTP 401): Invalid token." in result.stderr
    assert not cli.config.exists()


def test_a_command_with_a_wrong_token_exits_3(cli: Cli) -> None:
    result = cli.run("tasks", "list", UNICRON_SERVER=cli.server, UNICRON_TOKEN="uapi_wrong")

    assert result.returncode == 3
    assert "Invalid token." in result.stderr
    assert "unicron login" in result.stderr


def test_without_credentials_a_command_exits_3_and_says_how_to_log_in(cli: Cli) -> None:
    result = cli.run("nodes", "list")

    assert result.returncode == 3
    assert "not logged in" in result.stderr
    assert "unicron login --server URL --token TOKEN" in result.stderr


def test_a_role_that_does_not_allow_the_action_exits_3_with_the_api_words(
    cli: Cli, make_token: MakeToken
) -> None:
    node = NodeFactory(name="viewer-may-not-drain", state="healthy")
    viewer = make_token(Role.VIEWER)

    listed = cli.as_user("nodes", "list", token=viewer)
    refused = cli.as_user("nodes", "drain", node.name, token=viewer)

    assert listed.returncode == 0
    assert node.name in listed.stdout
    assert refused.returncode == 3
    assert "not authorised (HTTP 403): Your role does not allow this action." in refused.stderr
    node.refresh_from_db()
    assert node.state == "healthy"
