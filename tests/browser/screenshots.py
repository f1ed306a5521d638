"""Take the README screenshots from a running dashboard seeded with ``seed_dashboard_demo``.

Usage: python tests/browser/screenshots.py http://127.0.0.1:8000 docs/screenshots
(not a test: pytest does not collect it; the browser tests live in test_*.py)
"""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def login(page: Page, base: str, user: str, password: str = "unicron-demo") -> None:
    page.goto(f"{base}/login/")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")


def main(base: str, out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        ctx = browser.new_context(viewport={"width": 1440, "height": 900}, device_scale_factor=1)
        page = ctx.new_page()
        page.on("console", lambda m: errors.append(f"{page.url}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))
        page.goto(f"{base}/login/")
        page.screenshot(path=str(out / "login.png"))
        login(page, base, "operator")
        shots = [
            ("overview", "/", "[data-testid=node-grid] .device"),
            ("tasks", "/tasks/", "[data-testid=task-row]"),
            ("history", "/history/", "[data-testid=plan-item]"),
            ("alerts", "/alerts/", "[data-testid=alert-row]"),
            ("nodes", "/nodes/", "[data-testid=node-row]"),
        ]
        for name, path, ready in shots:
            page.goto(f"{base}{path}")
            page.wait_for_selector(ready)
            page.wait_for_timeout(600)
            page.screenshot(path=str(out / f"{name}.png"), full_page=name in {"history"})
        page.goto(f"{base}/tasks/")
        page.click("[data-testid=show-submit]")
        page.select_option("#preset", "gpt-1.3b")
        page.fill("input[name=name]", "")
        page.fill("input[name=min_workers]", "5")
        page.fill("input[name=max_workers]", "3")
        page.click("[data-testid=submit-task]")
        page.wait_for_selector("input[name=name][aria-invalid=true]")
        page.click("[data-testid=submit-task]")
        page.screenshot(path=str(out / "task-submit-errors.png"))
        page.fill("input[name=name]", "gpt-1.3b-ablation")
        page.click("[data-testid=submit-task]")
        page.wait_for_selector("[data-field-error=max_workers]")
        page.screenshot(path=str(out / "task-submit-errors.png"))
        first = page.locator("[data-testid=task-row] a").first
        first.click()
        page.wait_for_selector("#chart-iter .u-over")
        page.wait_for_timeout(600)
        page.screenshot(path=str(out / "task-detail.png"), full_page=True)
        page.goto(f"{base}/alerts/")
        page.wait_for_selector("[data-testid=alert-row]")
        page.locator("[data-testid=show-event]").first.click()
        page.wait_for_selector("[data-testid=stack]")
        page.wait_for_timeout(500)
        page.screenshot(path=str(out / "alert-evidence.png"), full_page=True)
        # the viewer's view: no operator controls
        ctx2 = browser.new_context(viewport={"width": 1440, "height": 900})
        vpage = ctx2.new_page()
        login(vpage, base, "viewer")
        vpage.goto(f"{base}/alerts/")
        vpage.wait_for_selector("[data-testid=alert-row]")
        vpage.screenshot(path=str(out / "alerts-viewer.png"))
        browser.close()
    for e in errors:
        print("console:", e)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
