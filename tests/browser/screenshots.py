"""Take the README screenshots from a running dashboard.

Usage::

    python tests/browser/screenshots.py BASE OUT [--state-dir DIR] [--user U --password P]

From a ``make demo`` run, ``--state-dir`` (the demo's ``UNICRON_STATE_DIR``, default ``.run``) reads the
demo accounts' passwords from ``demo-credentials.json`` (users ``demo-operator`` / ``demo-viewer``);
from a database seeded with ``seed_dashboard_demo`` the users are ``operator`` / ``viewer`` with the
password ``unicron-demo`` (the defaults). Read-only: it opens the fault-drill and submit forms but
submits only a form the API refuses (field errors). Not a test: pytest does not collect it.
"""

from __future__ import annotations

import argparse
import json
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


def login(page: Page, base: str, user: str, password: str) -> None:
    page.goto(f"{base}/login/")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")


def accounts(args: argparse.Namespace) -> tuple[tuple[str, str], tuple[str, str]]:
    """(operator user, password), (viewer user, password)."""
    if args.state_dir:
        creds = json.loads((Path(args.state_dir) / "demo-credentials.json").read_text())
        return ("demo-operator", creds["operator"]), ("demo-viewer", creds["viewer"])
    return (args.user, args.password), (args.viewer_user, args.viewer_password)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("base")
    parser.add_argument("out", type=Path)
    parser.add_argument("--state-dir", help="a make demo state directory (reads its demo accounts)")
    parser.add_argument("--user", default="operator")
    parser.add_argument("--password", default="unicron-demo")
    parser.add_argument("--viewer-user", default="viewer")
    parser.add_argument("--viewer-password", default="unicron-demo")
    args = parser.parse_args(argv)
    base, out = args.base.rstrip("/"), args.out
    (user, password), (viewer, viewer_password) = accounts(args)
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
        login(page, base, user, password)
        shots = [
            ("overview", "/", "#figures[data-loaded=true]"),
            ("tasks", "/tasks/", "[data-testid=task-row]"),
            ("history", "/history/", "[data-testid=plan-item]"),
            ("alerts", "/alerts/", "[data-testid=alert-row]"),
            ("nodes", "/nodes/", "[data-testid=node-row]"),
        ]
        for name, path, ready in shots:
            page.goto(f"{base}{path}")
            page.wait_for_selector(ready)
            page.wait_for_timeout(1200)
            if name == "history":  # the newest plans (the page grows with every reconfiguration)
                height = min(page.evaluate("document.body.scrollHeight"), 1800)
                page.screenshot(
                    path=str(out / f"{name}.png"),
                    full_page=True,
                    clip={"x": 0, "y": 0, "width": 1440, "height": height},
                )
            else:
                page.screenshot(path=str(out / f"{name}.png"))
        # the fault-drill form (opened, not sent) on a node with a running task's ranks
        (out / "fault-drill.png").unlink(missing_ok=True)
        for row in page.locator("[data-testid=node-row]").all():
            row.locator("[data-testid=inject-fault]").click()
            page.wait_for_selector("[data-testid=fault-dialog]")
            if page.is_enabled("[data-testid=confirm-inject]"):
                page.select_option("[data-testid=fault-kind]", "straggler")
                page.wait_for_timeout(300)
                page.screenshot(path=str(out / "fault-drill.png"))
            page.click("[data-testid=fault-dialog] button:has-text('Cancel')")
            page.wait_for_selector("[data-testid=fault-dialog]", state="detached")
            if (out / "fault-drill.png").exists():
                break
        # submit with errors: the API refuses it, nothing is created
        page.goto(f"{base}/tasks/")
        page.click("[data-testid=show-submit]")
        page.select_option("#preset", "gpt-1.3b")
        page.fill("input[name=name]", "gpt-1.3b-ablation")
        page.fill("input[name=min_workers]", "5")
        page.fill("input[name=max_workers]", "3")
        page.click("[data-testid=submit-task]")
        page.wait_for_selector("[data-field-error=max_workers]")
        page.screenshot(path=str(out / "task-submit-errors.png"))
        # the detail of the first running task in the list (its loss curve), else of the first task
        page.goto(f"{base}/tasks/")
        page.wait_for_selector("[data-testid=task-row]")
        running = page.locator("[data-testid=task-row]", has_text="running")
        rows = running if running.count() else page.locator("[data-testid=task-row]")
        rows.first.locator("a").first.click()
        page.wait_for_selector("#chart-iter .u-over")
        page.wait_for_timeout(2500)
        page.screenshot(path=str(out / "task-detail.png"), full_page=True)
        page.goto(f"{base}/alerts/")
        page.wait_for_selector("[data-testid=alert-row]")
        # a failure event's evidence and captured stack (a hang's or a straggler's, when there is one)
        rows = page.locator("[data-testid=alert-row]")
        row = rows.first
        for text in ("hang", "slower than its peers"):
            if rows.filter(has_text=text).count():
                row = rows.filter(has_text=text).first
                break
        if row.locator("[data-testid=show-event]").count():
            row.locator("[data-testid=show-event]").click()
            page.wait_for_selector("[data-testid=evidence]")
            page.wait_for_timeout(1000)  # the panel scrolls into view
            page.screenshot(path=str(out / "alert-evidence.png"))
        # the viewer's view: no operator controls
        ctx2 = browser.new_context(viewport={"width": 1440, "height": 900})
        vpage = ctx2.new_page()
        login(vpage, base, viewer, viewer_password)
        vpage.goto(f"{base}/alerts/")
        vpage.wait_for_selector("[data-testid=alert-row]")
        vpage.wait_for_timeout(600)
        vpage.screenshot(path=str(out / "alerts-viewer.png"))
        browser.close()
    for e in errors:
        print("console:", e)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
