"""``unicron transitions list``: the reconfiguration history."""

from __future__ import annotations

from typing import Annotated

import typer

from controlplane.cli.common import LimitOption, OffsetOption, OutputOption, open_client
from controlplane.cli.render import Output, emit, transitions_table

app = typer.Typer(help="Transitions: the reconfigurations the planner carried out.", no_args_is_help=True)

TRANSITION_STATES = ("pending", "running", "completed", "failed", "rolled_back")


@app.command("list")
def list_(
    ctx: typer.Context,
    task: Annotated[int | None, typer.Option("--task", "-t", help="Only this task's transitions.")] = None,
    state: Annotated[
        str | None, typer.Option("--state", "-s", help=f"Only in this state: {', '.join(TRANSITION_STATES)}.")
    ] = None,
    limit: LimitOption = 50,
    offset: OffsetOption = 0,
    output: OutputOption = Output.TABLE,
) -> None:
    """List transitions, newest first: kind, state, epochs, workers before → after, time taken."""
    with open_client(ctx) as client:
        page = client.list_transitions(task, state, limit, offset)
    emit(output, page, transitions_table)
