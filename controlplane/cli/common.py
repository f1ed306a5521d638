"""What the sub-command modules share: the global options, the client they open, the --output option
and the errors that end a command with a given exit code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from controlplane.cli import config
from controlplane.cli.client import DEFAULT_TIMEOUT_S, ExitCode, UnicronClient, normalise_server
from controlplane.cli.render import Output


class CliProblem(Exception):
    """A problem found before or instead of asking the server; ends the command with ``exit_code``."""

    def __init__(self, message: str, exit_code: ExitCode) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def usage_problem(message: str) -> CliProblem:
    return CliProblem(message, ExitCode.USAGE)


@dataclass
class GlobalOptions:
    """``unicron --server URL --token T --timeout S ...`` (flags, else UNICRON_SERVER / UNICRON_TOKEN)."""

    server: str | None = None
    token: str | None = None
    timeout: float = DEFAULT_TIMEOUT_S


def global_options(ctx: typer.Context) -> GlobalOptions:
    root = ctx.find_root()
    if not isinstance(root.obj, GlobalOptions):
        root.obj = GlobalOptions()
    return root.obj


def open_client(ctx: typer.Context) -> UnicronClient:
    """A client for the configured server and token; exit 3 when there is none (not logged in)."""
    options = global_options(ctx)
    try:
        credentials = config.resolve(options.server, options.token)
    except config.ConfigFileError as exc:
        raise usage_problem(str(exc)) from exc
    if not credentials.server or not credentials.token:
        missing = "server" if not credentials.server else "token"
        raise CliProblem(
            f"not logged in (no {missing}): run `unicron login --server URL --token TOKEN`, or set "
            f"{config.SERVER_ENV} and {config.TOKEN_ENV}",
            ExitCode.AUTH,
        )
    try:
        return UnicronClient(credentials.server, credentials.token, timeout=options.timeout)
    except ValueError as exc:
        raise usage_problem(f"bad server address: {exc}") from exc


def checked_server(server: str) -> str:
    try:
        return normalise_server(server)
    except ValueError as exc:
        raise usage_problem(f"bad server address: {exc}") from exc


OutputOption = Annotated[
    Output,
    typer.Option(
        "--output", "-o", help="table: for people; json: the API's JSON, for scripts.", case_sensitive=False
    ),
]
LimitOption = Annotated[int, typer.Option("--limit", min=1, max=1000, help="At most this many rows.")]
OffsetOption = Annotated[int, typer.Option("--offset", min=0, help="Skip this many rows first.")]
