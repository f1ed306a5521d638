"""Run-wide hooks: nothing a test started outlives the run (see :mod:`tests.processes`)."""

from __future__ import annotations

import pytest

from tests.processes import interrupt_on_sigterm, stop_all
from tests.security.harness import use_test_security_settings

# plain HTTP on localhost and a test-only SECRET_KEY, for this process and every server a test starts
use_test_security_settings()


def pytest_configure(config: pytest.Config) -> None:
    interrupt_on_sigterm()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    stop_all()
