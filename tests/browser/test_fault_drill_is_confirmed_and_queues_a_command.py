"""Nodes page: an operator's fault drill goes through a confirmation dialog and becomes an
inject_fault command in the node's outbox; cancelling the dialog sends nothing."""

from __future__ import annotations

from typing import Any


def test_fault_drill_through_the_dialog_creates_the_command(
    cluster: Any, new_page: Any, live_url: str
) -> None:
    from controlplane.apps.fleet.models import AgentCommand
    from controlplane.apps.training.models import Allocation

    node = cluster.nodes[1]  # node-b: ranks 8-15 of gpt-7b-pretrain
    task = cluster.tasks[0]
    rank = Allocation.objects.filter(task=task, active=True, device__node=node).order_by("rank").last().rank
    page = new_page("operator")
    page.goto(f"{live_url}/nodes/")
    row = f"[data-testid=node-row][data-node='{node.name}']"
    page.wait_for_selector(row)

    page.click(f"{row} [data-testid=inject-fault]")  # opens the drill form; nothing is sent yet
    page.wait_for_selector("[data-testid=fault-dialog]")
    page.click("[data-testid=fault-dialog] button:has-text('Cancel')")
    page.wait_for_selector("[data-testid=fault-dialog]", state="detached")
    assert not AgentCommand.objects.filter(type="inject_fault").exists()

    page.click(f"{row} [data-testid=inject-fault]")
    page.select_option("[data-testid=fault-kind]", "crash")
    page.select_option("[data-testid=fault-target]", f"{task.pk}:{rank}")
    page.click("[data-testid=confirm-inject]")

    toast = page.wait_for_selector("[data-testid=fault-queued]")
    command = AgentCommand.objects.get(type="inject_fault")
    assert str(command.command_id)[:8] in toast.text_content()
    assert (command.node_id, command.task_id, command.state) == (node.pk, task.pk, "pending")
    assert command.payload["fault"]["kind"] == "crash"
    assert command.payload["fault"]["rank"] == rank
    page.wait_for_selector("[data-testid=fault-dialog]", state="detached")


def test_node_loss_needs_no_target(cluster: Any, new_page: Any, live_url: str) -> None:
    from controlplane.apps.fleet.models import AgentCommand

    node = cluster.nodes[3]
    page = new_page("operator")
    page.goto(f"{live_url}/nodes/")
    row = f"[data-testid=node-row][data-node='{node.name}']"
    page.wait_for_selector(row)
    page.click(f"{row} [data-testid=inject-fault]")
    page.select_option("[data-testid=fault-kind]", "node_loss")
    assert not page.is_visible("[data-testid=fault-target]")
    page.click("[data-testid=confirm-inject]")

    page.wait_for_selector("[data-testid=fault-queued]")
    command = AgentCommand.objects.get(type="inject_fault")
    assert (command.node_id, command.task_id) == (node.pk, None)
    assert command.payload["fault"]["kind"] == "node_loss"
