from __future__ import annotations

import json
import stat

from tests.cli.harness import Cli


def test_login_stores_server_and_token_0600_in_a_0700_directory_and_logout_removes_them(cli: Cli) -> None:
    assert cli.token is not None

    result = cli.run("login", "--server", cli.server + "/", "--token", cli.token)

    assert result.returncode == 0, result.stderr
    assert "Logged in to" in result.stdout
    assert "as ops (operator)" in result.stdout
    assert stat.S_IMODE(cli.config.stat().st_mode) == 0o600
    assert stat.S_IMODE(cli.config.parent.stat().st_mode) == 0o700
    assert json.loads(cli.config.read_text()) == {"server": cli.server, "token": cli.token}

    whoami = cli.run("whoami")  # no flags: the stored server and token
    assert (whoami.returncode, whoami.stdout.split()[:2]) == (0, ["ops", "(operator)"]), whoami.stderr

    logout = cli.run("logout")
    assert logout.returncode == 0
    assert not cli.config.exists()
    assert cli.run("whoami").returncode == 3


def test_login_prompts_for_the_token_when_it_is_not_given(cli: Cli) -> None:
    result = cli.run("login", "--server", cli.server, input=f"{cli.token}\n")

    assert result.returncode == 0, result.stderr
    assert json.loads(cli.config.read_text())["token"] == cli.token
    assert cli.token not in result.stdout  # the prompt does not echo it
