"""The overview at fleet size: 2,048 nodes x 8 devices (16,384) drawn on a canvas map within 3 s of the
page's load, every node in it; the filter narrows it by name or state, zoom redraws it, and the device
under the pointer is named."""

from __future__ import annotations

import time
from typing import Any

from tests.browser.conftest import services

NODES, DEVICES = 2048, 8


def _fleet() -> int:
    from controlplane.apps.fleet.models import Device, Node
    from controlplane.apps.training.models import Allocation
    from tests.controlplane.factories import TaskFactory

    nodes = Node.objects.bulk_create(
        Node(name=f"fleet-{i:04d}", address=f"10.9.{i // 250}.{i % 250}", state="healthy")
        for i in range(NODES)
    )
    devices = Device.objects.bulk_create(
        Device(node=n, index=j, kind="h100-80g", memory_bytes=80 << 30) for n in nodes for j in range(DEVICES)
    )
    Node.objects.filter(name__in=["fleet-0007", "fleet-1500"]).update(state="lost")
    task = TaskFactory(name="big", state="running", max_workers=1024)
    Allocation.objects.bulk_create(
        Allocation(task=task, device=d, rank=r, epoch=1) for r, d in enumerate(devices[:1024])
    )
    return len(devices)


def test_overview_draws_a_fleet_of_2048_nodes(cluster: Any, new_page: Any, live_url: str) -> None:
    total = services(_fleet) + 32  # the demo cluster's 4 nodes x 8 as well
    page = new_page("viewer")
    began = time.monotonic()
    page.goto(f"{live_url}/")
    count = page.locator("[data-testid=fleet-count]")
    count.wait_for()
    deadline = time.monotonic() + 10
    while f"{total} devices" not in (count.text_content() or "") and time.monotonic() < deadline:
        time.sleep(0.05)
    first_render_s = time.monotonic() - began
    assert count.text_content() == f"{NODES + 4} of {NODES + 4} nodes · {total} devices"
    assert first_render_s <= 3.0, first_render_s
    assert page.locator("[data-testid=device-cell]").count() == 0  # no element per device at this size
    canvas = page.locator("[data-testid=fleet-canvas]")
    height = canvas.bounding_box()["height"]

    page.fill("[data-testid=fleet-filter]", "lost")
    assert count.text_content() == f"2 of {NODES + 4} nodes · 16 devices"
    page.fill("[data-testid=fleet-filter]", "fleet-20")
    assert count.text_content() == f"48 of {NODES + 4} nodes · 384 devices"
    page.fill("[data-testid=fleet-filter]", "")
    page.click("[data-testid=fleet-zoom-in]")
    assert canvas.bounding_box()["height"] > height
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + 2, box["y"] + 2)
    tip = page.locator("[data-testid=fleet-tip]")
    tip.wait_for()
    assert "device 0" in (tip.text_content() or "")
    print(f"\nFIGURE overview at {NODES} nodes x {DEVICES}: first render {first_render_s:.2f} s")
