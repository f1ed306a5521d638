from __future__ import annotations

from tests.cli.harness import Cli
from tests.e2e.loop import free_port


def test_environment_overrides_the_file_and_flags_override_the_environment(cli: Cli) -> None:
    assert cli.token is not None
    assert cli.run("login", "--server", cli.server, "--token", cli.token).returncode == 0
    nowhere = f"http://127.0.0.1:{free_port()}"

    from_file = cli.run("whoami")
    from_env = cli.run("whoami", UNICRON_SERVER=nowhere, UNICRON_TOKEN=cli.token)
    from_flag = cli.run("--server", cli.server, "whoami", UNICRON_SERVER=nowhere, UNICRON_TOKEN=cli.token)
    bad_env_token = cli.run("whoami", UNICRON_TOKEN="uapi_wrong")

    assert from_file.returncode == 0, from_file.stderr
    assert from_env.returncode == 4
    assert f"cannot reach {nowhere}" in from_env.stderr
    assert from_flag.returncode == 0, from_flag.stderr
    assert bad_env_token.returncode == 3


def test_the_stored_token_is_never_sent_to_another_server(cli: Cli) -> None:
    assert cli.token is not None
    assert cli.run("login", "--server", cli.server, "--token", cli.token).returncode == 0
    elsewhere = f"http://127.0.0.1:{free_port()}"

    result = cli.run("--server", elsewhere, "tasks", "list")

    assert result.returncode == 3  # no token for that server: not logged in there
    assert "not logged in (no token)" in result.stderr
