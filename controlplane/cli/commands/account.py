"""``unicron login`` / ``logout`` / ``whoami``."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from controlplane.cli import config
from controlplane.cli.client import ApiError, ExitCode, UnicronClient
from controlplane.cli.common import CliProblem, OutputOption, checked_server, global_options, open_client
from controlplane.cli.render import Output, print_json, stdout

WHERE_TOKENS_COME_FROM = (
    "Log in with `unicron login --server URL --username NAME` (your dashboard password; the server issues "
    "a new token), or get a token from an admin: `python manage.py issue_api_token NAME` on the server; "
    "`make demo` prints one per demo account."
)


def login(
    ctx: typer.Context,
    server: Annotated[
        str | None,
        typer.Option("--server", help="The control plane's address, e.g. http://127.0.0.1:8000."),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token", help="Your API token (prompted for, hidden, when neither it nor --username is given)."
        ),
    ] = None,
    username: Annotated[
        str | None,
        typer.Option(
            "--username",
            "-u",
            help="Log in with your dashboard username and password (prompted for, hidden) and get a new API "
            "token from the server; your previous token stops working.",
        ),
    ] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="With --username: read the password from standard input.")
    ] = False,
) -> None:
    """Check a server address and API token against the server and store both in the config file.

    The file is $UNICRON_CONFIG or ~/.config/unicron/config.json, mode 0600 in a 0700 directory.
    With --username, the password is checked by the dashboard's login (its lock-out after repeated
    failures applies) and the server issues a new API token for you (POST /api/v1/me/token/), which
    replaces your previous one. Otherwise give a token: `python manage.py issue_api_token USERNAME`
    on the server prints one; `make demo` prints one per demo account."""
    options = global_options(ctx)
    try:
        stored = config.load()
    except config.ConfigFileError:
        stored = config.Credentials(None, None)
    address = server or options.server or stored.server
    if not address:
        raise CliProblem("name the server: unicron login --server URL", ExitCode.USAGE)
    address = checked_server(address)
    if username and token:
        raise CliProblem("give --token or --username, not both", ExitCode.USAGE)
    if password_stdin and not username:
        raise CliProblem("--password-stdin goes with --username", ExitCode.USAGE)
    secret = token or (None if username else options.token)
    if username:
        password = (
            sys.stdin.readline().rstrip("\r\n")
            if password_stdin
            else typer.prompt("Password", hide_input=True)
        )
        if not password:
            raise CliProblem("no password given", ExitCode.USAGE)
        with UnicronClient(address, None, timeout=options.timeout) as anonymous:
            issued = anonymous.issue_token_with_password(username, password)
        secret = str(issued["token"])
    if not secret:
        secret = typer.prompt("API token", hide_input=True).strip()
    if not secret:
        raise CliProblem(f"no token given. {WHERE_TOKENS_COME_FROM}", ExitCode.USAGE)
    with UnicronClient(address, secret, timeout=options.timeout) as client:
        try:
            me = client.me()
        except ApiError as exc:
            if exc.exit_code == ExitCode.AUTH:
                exc.message += f" (nothing stored; {WHERE_TOKENS_COME_FROM})"
            raise
    path = config.save(config.Credentials(address, secret))
    role = me.get("role") or "no role"
    stdout().print(f"Logged in to {address} as {me.get('username')} ({role}); saved to {path}")


def logout() -> None:
    """Forget the stored server and token (delete the config file)."""
    path = config.config_path()
    if config.forget(path):
        stdout().print(f"Logged out: removed {path}")
    else:
        stdout().print(f"Not logged in: there was no {path}")


def whoami(ctx: typer.Context, output: OutputOption = Output.TABLE) -> None:
    """Show the server, user and role the current credentials stand for."""
    with open_client(ctx) as client:
        me = client.me()
        if output is Output.JSON:
            print_json(me)
        else:
            stdout().print(f"{me.get('username')} ({me.get('role') or 'no role'}) on {client.server}")
