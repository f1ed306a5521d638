"""Logging in: every page needs a session; a bad password is refused at the form; the role shows."""

from __future__ import annotations

from typing import Any

from tests.browser.conftest import login


def test_pages_redirect_to_login_and_bad_password_is_refused(
    cluster: Any, new_page: Any, live_url: str
) -> None:
    page = new_page()
    page.goto(f"{live_url}/alerts/")
    assert page.url.startswith(f"{live_url}/login/?next=/alerts/")
    page.fill("input[name=username]", "operator")
    page.fill("input[name=password]", "wrong")
    page.click("button[type=submit]")
    page.wait_for_selector(".error-box")
    assert "/login/" in page.url


def test_login_lands_on_overview_with_role_and_live_feed(cluster: Any, new_page: Any, live_url: str) -> None:
    page = new_page()
    login(page, live_url, "operator")
    assert page.text_content("[data-testid=role]") == "operator"
    page.wait_for_selector("[data-testid=device-cell]")
    assert page.locator("[data-testid=device-cell]").count() == 32
    assert page.text_content("#live-status") == "live"
