"""A live control plane for the CLI tests: daphne serving the project's ASGI application on the
pytest-django test database (transactional tests: rows the test writes are committed, so the server
sees them), and users with a role and a DRF token."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from controlplane.apps.accounts.roles import Role
from controlplane.apps.accounts.services import do_set_user_role
from tests.cli.harness import Cli
from tests.controlplane.factories import UserFactory

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def api_server(django_db_setup: None, django_db_blocker: Any, tmp_path_factory: Any) -> Iterator[str]:
    """The server's address (one daphne per test session)."""
    from django.conf import settings

    from tests.e2e.loop import AsgiServer, free_port, test_database_url

    with django_db_blocker.unblock():
        db_url = test_database_url()
    env = dict(os.environ, DATABASE_URL=db_url, REDIS_URL=settings.REDIS_URL, PYTHONPATH=str(REPO))
    server = AsgiServer(free_port(), env, tmp_path_factory.mktemp("daphne") / "daphne.log")
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def issue_api_token(user: User) -> str:
    """A REST API key for ``user``, issued the way ``manage.py issue_api_token`` does."""
    from controlplane.apps.accounts.services import do_rotate_api_token

    return str(do_rotate_api_token(None, user)[1])


MakeToken = Callable[..., str]


@pytest.fixture
def make_token(transactional_db: None) -> MakeToken:
    """A DRF token of a new user with ``role`` (None: a user without any role)."""

    def make(role: Role | None = Role.OPERATOR, username: str | None = None) -> str:
        user: User = UserFactory(username=username) if username else UserFactory()
        if role is not None:
            do_set_user_role(None, user, role)
        return issue_api_token(user)

    return make


@pytest.fixture
def cli(api_server: str, make_token: MakeToken, tmp_path: Path) -> Cli:
    """``unicron`` for an operator of the live server (its config file under ``tmp_path``)."""
    home = tmp_path / "home"
    home.mkdir()
    return Cli(api_server, home, make_token(Role.OPERATOR, "ops"))
