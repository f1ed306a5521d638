"""Nodes page: an isolated node and an isolated device show why they were isolated, and an operator
returns each to service on probation through a confirmed button (audited); a quarantined node shows its
reason and offers no return, only the quarantine clearance."""

from __future__ import annotations

from typing import Any


def test_an_operator_returns_an_isolated_node_and_device_to_service(
    cluster: Any, new_page: Any, live_url: str
) -> None:
    from controlplane.apps.accounts.models import AuditEntry
    from controlplane.apps.fleet.models import Device, Node
    from controlplane.apps.fleet.services import do_quarantine_node, do_set_device_state, do_set_node_state

    isolated, holder, quarantined = cluster.nodes[1], cluster.nodes[2], cluster.nodes[3]
    do_set_node_state(isolated, "isolated", "sev1 straggler: rank 9 compute 3.1x its peers")
    device = Device.objects.filter(node=holder).order_by("index").first()
    assert device is not None
    do_set_device_state(device, "isolated", "sev1 gpu_ecc (failure event 42): uncorrectable ECC error")
    do_quarantine_node(None, quarantined, "2 sev1 failures on it within 604800s (gpu-ecc)")

    page = new_page("operator")
    page.goto(f"{live_url}/nodes/")
    row = f"[data-testid=node-row][data-node='{isolated.name}']"
    page.wait_for_selector(f"{row} [data-testid=node-out-reason]")
    assert "compute 3.1x" in page.text_content(f"{row} [data-testid=node-out-reason]")
    q_row = f"[data-testid=node-row][data-node='{quarantined.name}']"
    assert "2 sev1 failures" in page.text_content(f"{q_row} [data-testid=node-out-reason]")
    assert page.query_selector(f"{q_row} [data-testid=return-node-to-service]") is None
    d_row = f"[data-testid=node-row][data-node='{holder.name}'] [data-testid=isolated-device]"
    assert "uncorrectable ECC" in page.text_content(d_row)

    page.click(f"{row} [data-testid=return-node-to-service]")
    page.click("#confirm-ok")
    page.wait_for_selector(f"{row} [data-testid=return-node-to-service]", state="detached")
    assert Node.objects.get(pk=isolated.pk).state == "joining"

    page.click(f"{d_row} [data-testid=return-device-to-service]")
    page.click("#confirm-ok")
    page.wait_for_selector(d_row, state="detached")
    device.refresh_from_db()
    assert (device.state, device.probation_until is not None) == ("healthy", True)
    assert set(AuditEntry.objects.values_list("verb", flat=True)) >= {
        "return_node_to_service",
        "return_device_to_service",
    }
