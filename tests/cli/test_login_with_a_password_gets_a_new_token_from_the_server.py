from __future__ import annotations

import json

from django.contrib.auth.models import User

from controlplane.apps.accounts.models import ApiToken
from tests.cli.harness import Cli


def _password(username: str) -> str:
    user = User.objects.get(username=username)
    user.set_password("correct horse battery")
    user.save()
    return "correct horse battery"


def test_login_with_username_and_password_stores_a_new_token_that_replaces_the_old_one(cli: Cli) -> None:
    password = _password("ops")
    old_token = cli.token
    assert old_token is not None

    result = cli.run("login", "--server", cli.server, "--username", "ops", "--password-stdin", input=password)

    assert result.returncode == 0, result.stderr
    assert "as ops (operator)" in result.stdout
    stored = json.loads(cli.config.read_text())
    assert stored["token"].startswith("uapi_")
    assert stored["token"] != old_token
    assert ApiToken.objects.filter(user__username="ops").count() == 1
    assert cli.run("whoami").returncode == 0
    assert cli.as_user("whoami", token=old_token).returncode == 3  # rotated: the old key stops working


def test_a_wrong_password_exits_3_with_the_login_forms_words_and_stores_nothing(cli: Cli) -> None:
    _password("ops")

    result = cli.run(
        "login", "--server", cli.server, "-u", "ops", "--password-stdin", input="wrong password\n"
    )

    assert result.returncode == 3
    assert "Please enter a correct username and password" in result.stderr
    assert not cli.config.exists()
    assert cli.as_user("whoami").returncode == 0  # the existing token still works
