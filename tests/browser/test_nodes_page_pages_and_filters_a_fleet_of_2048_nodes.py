"""The Nodes page at fleet size: 2,048 nodes x 8 devices (16,384). Its first render (a page of 50 nodes
with their devices, and the whole fleet's device grid) completes within 3 s; the pager counts every node;
the state filter and the name search are answered by the server and kept in the URL (a reload shows the
same rows); the next page shows the next 50 nodes; a drill's targets come from the fleet map."""

from __future__ import annotations

import re
import time
from typing import Any

from tests.browser.conftest import services

NODES, DEVICES, PAGE = 2048, 8, 50
LOST = ["fleet-0007", "fleet-0093", "fleet-1500", "fleet-2047"]


def _fleet() -> int:
    from controlplane.apps.dashboard.demo import seed_users
    from controlplane.apps.fleet.models import Device, Node
    from controlplane.apps.training.models import Allocation
    from tests.controlplane.factories import TaskFactory

    seed_users()
    nodes = Node.objects.bulk_create(
        Node(name=f"fleet-{i:04d}", address=f"10.9.{i // 250}.{i % 250}", state="healthy")
        for i in range(NODES)
    )
    devices = Device.objects.bulk_create(
        Device(node=n, index=j, kind="h100-80g", memory_bytes=80 << 30) for n in nodes for j in range(DEVICES)
    )
    Node.objects.filter(name__in=LOST).update(state="lost")
    task = TaskFactory(name="big", state="running", max_workers=1024)
    Allocation.objects.bulk_create(
        Allocation(task=task, device=d, rank=r, epoch=1) for r, d in enumerate(devices[:1024])
    )
    return task.pk


def _shown(first: int, last: int, count: int | str) -> str:
    """The pager's text: first, an en dash, last, " of ", count."""
    return f"{first}\u2013{last} of {count}"


def _rows(page: Any) -> list[str]:
    return page.eval_on_selector_all("[data-testid=node-row]", "rows => rows.map(r => r.dataset.node)")


def _wait_for_rows(page: Any, expected: list[str]) -> None:
    deadline = time.monotonic() + 8
    while _rows(page) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _rows(page) == expected


def test_nodes_page_pages_and_filters_a_fleet_of_2048_nodes(
    transactional_db: None, browser: Any, new_page: Any, live_url: str
) -> None:
    task_id = services(_fleet)
    page = new_page("operator")
    began = time.monotonic()
    page.goto(f"{live_url}/nodes/")
    pager = page.locator("[data-testid=node-range]")
    fleet_count = page.locator("[data-testid=fleet-count]")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (
        "of 2,048" in (pager.text_content() or "")
        and f"{NODES * DEVICES} devices" in (fleet_count.text_content() if fleet_count.count() else "")
        and page.locator("[data-testid=node-row]").count() == PAGE
    ):
        time.sleep(0.05)
    first_render_s = time.monotonic() - began
    assert pager.text_content() == _shown(1, 50, "2,048")
    assert pager.get_attribute("data-count") == str(NODES)
    assert fleet_count.text_content() == f"{NODES} of {NODES} nodes · {NODES * DEVICES} devices"
    assert first_render_s <= 3.0, first_render_s
    assert _rows(page) == [f"fleet-{i:04d}" for i in range(PAGE)]
    assert page.locator("[data-testid=device-cell]").count() == 0  # the grid is a canvas at this size
    first = "[data-testid=node-row][data-node='fleet-0000']"
    assert "8 \u00d7 h100-80g" in (page.text_content(f"{first} td:nth-child(3)") or "")
    page.wait_for_function(
        "() => document.querySelector(\"[data-node='fleet-0000'] td:nth-child(4)\").textContent === '8 / 8'"
    )

    # a drill's targets are the ranks the fleet map places on the node
    page.click(f"{first} [data-testid=inject-fault]")
    page.wait_for_selector("[data-testid=fault-dialog]")
    targets = page.eval_on_selector_all("[data-testid=fault-target] option", "os => os.map(o => o.value)")
    assert targets == [f"{task_id}:"] + [f"{task_id}:{r}" for r in range(DEVICES)]
    page.click("[data-testid=fault-dialog] button:has-text('Cancel')")
    page.wait_for_selector("[data-testid=fault-dialog]", state="detached")

    # next page: the next 50 nodes, the page in the URL
    page.click("[data-testid=node-next]")
    _wait_for_rows(page, [f"fleet-{i:04d}" for i in range(PAGE, 2 * PAGE)])
    assert pager.text_content() == _shown(51, 100, "2,048")
    assert re.search(r"[?&]page=2\b", page.url)
    page.reload()
    _wait_for_rows(page, [f"fleet-{i:04d}" for i in range(PAGE, 2 * PAGE)])
    page.click("[data-testid=node-prev]")
    _wait_for_rows(page, [f"fleet-{i:04d}" for i in range(PAGE)])

    # the state filter: exactly the lost nodes, kept in the URL
    page.select_option("[data-testid=node-state-filter]", "lost")
    _wait_for_rows(page, LOST)
    assert pager.text_content() == _shown(1, len(LOST), len(LOST))
    assert "state=lost" in page.url
    assert page.locator("[data-testid=node-next]").is_disabled()
    page.reload()
    _wait_for_rows(page, LOST)
    assert page.input_value("[data-testid=node-state-filter]") == "lost"

    # the name search (debounced) finds one node, within the state filter and without it
    page.select_option("[data-testid=node-state-filter]", "")
    page.fill("[data-testid=node-name-filter]", "fleet-1234")
    _wait_for_rows(page, ["fleet-1234"])
    assert pager.text_content() == _shown(1, 1, 1)
    assert "name=fleet-1234" in page.url
    page.fill("[data-testid=node-name-filter]", "fleet-15")
    _wait_for_rows(page, [f"fleet-15{i:02d}" for i in range(PAGE)])
    assert pager.text_content() == _shown(1, 50, 100)
    page.select_option("[data-testid=node-state-filter]", "lost")
    _wait_for_rows(page, ["fleet-1500"])
    print(f"\nFIGURE nodes page at {NODES} nodes x {DEVICES}: first render {first_render_s:.2f} s")
