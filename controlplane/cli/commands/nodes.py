"""``unicron nodes ...``: list nodes, drain them, clear their quarantine, run fault-injection drills."""

from __future__ import annotations

from functools import partial
from typing import Annotated

import typer

from controlplane.cli.common import LimitOption, OffsetOption, OutputOption, open_client
from controlplane.cli.render import Output, emit, node_line, nodes_table, print_json, stdout

app = typer.Typer(help="Nodes: list, drain, clear quarantine, fault-injection drills.", no_args_is_help=True)

NODE_STATES = ("joining", "healthy", "suspect", "isolated", "lost", "draining")
FAULTS = ("crash", "exception", "hang", "straggler", "network_error", "node_loss")
NodeRef = Annotated[str, typer.Argument(help="The node's name (or its id).", show_default=False)]


@app.command("list")
def list_(
    ctx: typer.Context,
    state: Annotated[
        str | None, typer.Option("--state", "-s", help=f"Only nodes in this state: {', '.join(NODE_STATES)}.")
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Only nodes whose name contains this.")] = None,
    limit: LimitOption = 50,
    offset: OffsetOption = 0,
    output: OutputOption = Output.TABLE,
) -> None:
    """List nodes: state, quarantine, devices, last heartbeat."""
    with open_client(ctx) as client:
        page = client.list_nodes(state, name, limit, offset)
    emit(output, page, nodes_table)


@app.command("drain")
def drain(ctx: typer.Context, node: NodeRef, output: OutputOption = Output.TABLE) -> None:
    """Take a node out of service gracefully: its tasks are re-planned elsewhere (operator)."""
    with open_client(ctx) as client:
        drained = client.drain_node(int(client.find_node(node)["id"]))
    emit(output, drained, partial(node_line, "Draining"))


@app.command("clear")
def clear(ctx: typer.Context, node: NodeRef, output: OutputOption = Output.TABLE) -> None:
    """Clear a node's quarantine: let it back into plans (operator)."""
    with open_client(ctx) as client:
        cleared = client.clear_quarantine(int(client.find_node(node)["id"]))
    emit(output, cleared, partial(node_line, "Cleared"))


@app.command("drill")
def drill(
    ctx: typer.Context,
    node: NodeRef,
    fault: Annotated[
        str, typer.Option("--fault", help=f"What to inject: {', '.join(FAULTS)}.", show_default=False)
    ],
    task: Annotated[
        int | None, typer.Option("--task", help="The running task to inject it into (not for node_loss).")
    ] = None,
    rank: Annotated[
        int | None, typer.Option("--rank", help="One of the task's ranks on this node (default: all there).")
    ] = None,
    slowdown: Annotated[
        float | None, typer.Option("--slowdown", help="A straggler's slowdown factor.")
    ] = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Fault-injection drill (operator): queue a fault for the node's agent; it acks when it fires."""
    body: dict[str, object] = {"fault": fault}
    for key, value in (("task", task), ("rank", rank), ("slowdown", slowdown)):
        if value is not None:
            body[key] = value
    with open_client(ctx) as client:
        command = client.inject_fault(int(client.find_node(node)["id"]), body)
    if output is Output.JSON:
        print_json(command)
    else:
        queued = f"command {command.get('command_id')}, {command.get('state')}"
        stdout().print(f"Queued drill {fault} on node {node} ({queued})")
