"""``unicron alerts ...``: list, acknowledge and resolve alerts."""

from __future__ import annotations

from functools import partial
from typing import Annotated

import typer

from controlplane.cli.common import LimitOption, OffsetOption, OutputOption, open_client
from controlplane.cli.render import Output, alert_line, alerts_table, emit

app = typer.Typer(help="Alerts: list, acknowledge, resolve.", no_args_is_help=True)

ALERT_STATES = ("open", "acknowledged", "resolved")
SEVERITIES = ("sev1", "sev2", "sev3")
AlertId = Annotated[int, typer.Argument(min=1, help="The alert's id.", show_default=False)]


@app.command("list")
def list_(
    ctx: typer.Context,
    state: Annotated[
        list[str] | None,
        typer.Option(
            "--state", "-s", help=f"Only alerts in this state (repeatable): {', '.join(ALERT_STATES)}."
        ),
    ] = None,
    severity: Annotated[
        list[str] | None,
        typer.Option(
            "--severity", help=f"Only alerts of this severity (repeatable): {', '.join(SEVERITIES)}."
        ),
    ] = None,
    limit: LimitOption = 50,
    offset: OffsetOption = 0,
    output: OutputOption = Output.TABLE,
) -> None:
    """List alerts, newest first."""
    with open_client(ctx) as client:
        page = client.list_alerts(state or (), severity or (), limit, offset)
    emit(output, page, alerts_table)


@app.command("ack")
def ack(
    ctx: typer.Context,
    alert_id: AlertId,
    message: Annotated[str, typer.Option("--message", "-m", help="An optional comment.")] = "",
    output: OutputOption = Output.TABLE,
) -> None:
    """Acknowledge an open alert (operator)."""
    with open_client(ctx) as client:
        alert = client.acknowledge_alert(alert_id, message)
    emit(output, alert, partial(alert_line, "Acknowledged"))


@app.command("resolve")
def resolve(
    ctx: typer.Context,
    alert_id: AlertId,
    message: Annotated[
        str, typer.Option("--message", "-m", help="What was done (required).", show_default=False)
    ],
    output: OutputOption = Output.TABLE,
) -> None:
    """Resolve an alert with a comment saying what was done (operator)."""
    with open_client(ctx) as client:
        alert = client.resolve_alert(alert_id, message)
    emit(output, alert, partial(alert_line, "Resolved"))
