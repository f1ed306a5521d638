"""Run-wide hooks: the embedded servers a run with nothing set needs, started here and stopped when it
ends; nothing a test started outlives the run (see :mod:`tests.processes`)."""

from __future__ import annotations

import atexit
from collections.abc import Iterator

import pytest

from tests.processes import interrupt_on_sigterm, stop_all
from tests.security.harness import use_test_security_settings

# plain HTTP on localhost and a test-only SECRET_KEY, for this process and every server a test starts
use_test_security_settings()


def pytest_configure(config: pytest.Config) -> None:
    interrupt_on_sigterm()
    if config.pluginmanager.hasplugin("django"):
        from controlplane.config.embedded import start_servers

        # the settings already point at these addresses; the servers and agents tests start inherit them
        start_servers(export=True)
        # exit handlers run last-registered first: the children the tests started go before the servers
        atexit.register(stop_all)


@pytest.fixture(scope="session")
def django_db_modify_db_settings() -> None:
    """This process's database connections are not kept between requests: the consumers under test run
    their calls on executor threads whose kept connections would outlive the test database and keep it
    from being dropped. The servers the tests start keep theirs, as deployed."""
    from django.conf import settings

    settings.DATABASES["default"]["CONN_MAX_AGE"] = 0


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None) -> Iterator[None]:
    """pytest-django's, and then: the agent links' failure lane keeps its own database connection on its
    own thread, closed before the test database is dropped."""
    yield
    from controlplane.live.failure_lane import close_lane_connection

    close_lane_connection()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    stop_all()


def pytest_unconfigure(config: pytest.Config) -> None:
    from controlplane.config.embedded import stop_servers

    stop_servers()
