from __future__ import annotations

import json

from tests.cli.harness import Cli


def test_rotate_stores_the_new_token_in_the_config_file_and_the_old_one_stops_working(cli: Cli) -> None:
    old = cli.token
    assert old is not None
    assert cli.run("login", "--server", cli.server, "--token", old).returncode == 0

    shown = cli.run("token", "show")
    rotated = cli.run("token", "rotate")

    assert shown.returncode == 0, shown.stderr
    assert old[:11] in shown.stdout  # the prefix, never the key
    assert old not in shown.stdout
    assert rotated.returncode == 0, rotated.stderr
    assert "Rotated: new token uapi_" in rotated.stdout
    new = json.loads(cli.config.read_text())["token"]
    assert new != old
    assert new not in rotated.stdout
    assert cli.run("whoami").returncode == 0
    assert cli.as_user("whoami", token=old).returncode == 3


def test_rotating_a_token_given_on_the_command_line_prints_the_new_one_once(cli: Cli) -> None:
    rotated = cli.as_user("token", "rotate")

    assert rotated.returncode == 0, rotated.stderr
    new = rotated.stdout.strip().splitlines()[-1]
    assert new.startswith("uapi_")
    assert not cli.config.exists()
    assert cli.as_user("whoami", token=new).returncode == 0
