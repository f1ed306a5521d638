"""Entry point of the ``unicron`` console script: the command tree and its exit codes."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from controlplane.cli.client import DEFAULT_TIMEOUT_S, ApiError, ExitCode
from controlplane.cli.commands import account, alerts, nodes, tasks, token, transitions
from controlplane.cli.common import CliProblem, global_options
from controlplane.cli.config import SERVER_ENV, TOKEN_ENV
from controlplane.cli.render import stderr

EXIT_CODES = """Exit codes: 0 ok; 1 the API refused the request (4xx: its own words are printed); 2 usage
error (bad flags, an unreadable spec file; nothing was sent); 3 not logged in, or the credentials or
the role were refused (401/403); 4 server error (5xx) or the server could not be reached; `tasks watch`:
0 the task completed, 5 it failed or was cancelled, 130 Ctrl-C."""

app = typer.Typer(
    name="unicron",
    help="Command-line client of the Unicron control plane's REST API.\n\n" + EXIT_CODES,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def root(
    ctx: typer.Context,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            envvar=SERVER_ENV,
            help="The server's address (overrides the config file).",
            show_default=False,
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token", envvar=TOKEN_ENV, help="An API token (overrides the config file).", show_default=False
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.1, help="Seconds to wait for each answer of the server.")
    ] = DEFAULT_TIMEOUT_S,
) -> None:
    options = global_options(ctx)
    options.server, options.token, options.timeout = server or None, token or None, timeout


app.command("login")(account.login)
app.command("logout")(account.logout)
app.command("whoami")(account.whoami)
app.add_typer(tasks.app, name="tasks")
app.add_typer(nodes.app, name="nodes")
app.add_typer(alerts.app, name="alerts")
app.add_typer(transitions.app, name="transitions")
app.add_typer(token.app, name="token")


def _fail(message: str, code: ExitCode) -> None:
    stderr().print(f"unicron: {message}", markup=False)
    sys.exit(int(code))


def main() -> None:
    try:
        app(prog_name="unicron")
    except ApiError as exc:
        where = f"HTTP {exc.status}" if exc.status is not None else "no answer"
        label = {
            ExitCode.API_REFUSED: "refused",
            ExitCode.AUTH: "not authorised",
            ExitCode.SERVER: "server error",
        }.get(exc.exit_code, "error")
        hint = " (run `unicron login` with a valid token)" if exc.status == 401 else ""
        _fail(f"{label} ({where}): {exc.message}{hint}", exc.exit_code)
    except CliProblem as exc:
        _fail(exc.message, exc.exit_code)
