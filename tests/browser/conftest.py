"""Browser tests: headless Debian Chromium (Playwright) against a real daphne (HTTP + Channels).

The server is a forked ``DaphneProcess`` serving the project's ASGI application (with static files)
against the pytest-django test database; tests use ``transactional_db`` so their writes commit, the
server sees them and the services' on-commit live events reach the page through Redis.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORD = "unicron-demo"
T = TypeVar("T")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).parent == here:
            item.add_marker(pytest.mark.browser)
            if not Path(CHROMIUM).exists():
                item.add_marker(pytest.mark.skip(reason=f"{CHROMIUM} is not installed"))


def _application(static: bool) -> Any:
    from channels.routing import get_default_application
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    app = get_default_application()
    return ASGIStaticFilesHandler(app) if static else app


@pytest.fixture(scope="session")
def live_url(django_db_setup: None, django_db_blocker: Any) -> Iterator[str]:
    """Base URL of a daphne serving the test database (one for the session)."""
    from daphne.testing import DaphneProcess
    from django.db import connections

    process = DaphneProcess("127.0.0.1", partial(_application, True))
    with django_db_blocker.unblock():
        connections.close_all()  # the fork must not share the parent's database sockets
        process.start()  # forked while unblocked: the server may use the test database
    if not process.ready.wait(timeout=30):
        process.terminate()
        raise RuntimeError("daphne did not start within 30 s")
    try:
        yield f"http://127.0.0.1:{process.port.value}"
    finally:
        process.terminate()
        process.join(timeout=10)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the ORM calls the tests make in between
    # browser steps are still plain synchronous code, so allow them for the browser tests only.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield b
            b.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def services(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call the domain services from a thread of their own, as a Celery worker or consumer would.

    Playwright's sync API keeps an event loop running in the test thread, where the broadcaster's
    ``async_to_sync`` refuses to run; in a plain thread the on-commit live events go out normally.
    """

    def run() -> T:
        from django.db import connections

        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run).result(timeout=30)


@pytest.fixture
def cluster(transactional_db: None, browser: Any) -> Any:
    """Users admin/operator/viewer, 4 nodes x 8 GPUs and three running tasks (through the services)."""
    from controlplane.apps.dashboard.demo import seed_demo

    return services(seed_demo, with_history=False)


@pytest.fixture
def new_page(browser: Any, live_url: str) -> Iterator[Any]:
    """``new_page(user)`` -> a logged-in page; console errors fail the test."""
    contexts: list[Any] = []
    errors: list[str] = []

    def make(user: str | None = None) -> Any:
        ctx = browser.new_context(viewport={"width": 1366, "height": 850})
        ctx.set_default_timeout(8000)
        contexts.append(ctx)
        page = ctx.new_page()
        page.on("pageerror", lambda e: errors.append(f"{page.url}: {e} {e.stack}"))
        if user is not None:
            login(page, live_url, user)
        return page

    yield make
    for ctx in contexts:
        ctx.close()
    assert not errors, f"JavaScript errors: {errors}"


def login(page: Any, base: str, user: str, password: str = PASSWORD) -> None:
    page.goto(f"{base}/login/")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")
    page.wait_for_selector("body[data-live=open]")


def mark_page(page: Any) -> None:
    """Plant a marker that a reload or navigation would erase."""
    page.evaluate("window.__noReload = 'still-here'")


def assert_not_reloaded(page: Any) -> None:
    assert page.evaluate("window.__noReload") == "still-here", "the page reloaded"
