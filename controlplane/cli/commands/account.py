"""``unicron login`` / ``logout`` / ``whoami``."""

from __future__ import annotations

from typing import Annotated

import typer

from controlplane.cli import config
from controlplane.cli.client import ApiError, ExitCode, UnicronClient
from controlplane.cli.common import CliProblem, OutputOption, checked_server, global_options, open_client
from controlplane.cli.render import Output, print_json, stdout

WHERE_TOKENS_COME_FROM = (
    "An API token belongs to a user: an admin creates one with `python manage.py drf_create_token "
    "USERNAME` on the server (or in the admin site, Auth Token > Tokens); `make demo` prints one per "
    "demo account."
)


def login(
    ctx: typer.Context,
    server: Annotated[
        str | None,
        typer.Option("--server", help="The control plane's address, e.g. http://127.0.0.1:8000."),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option("--token", help="Your API token (prompted for, hidden, when not given)."),
    ] = None,
) -> None:
    """Check a server address and API token against the server and store both in the config file.

    The file is $UNICRON_CONFIG or ~/.config/unicron/config.json, mode 0600 in a 0700 directory.
    An API token belongs to a user: an admin creates one with `python manage.py drf_create_token
    USERNAME` on the server (or in the admin site); `make demo` prints one per demo account."""
    options = global_options(ctx)
    try:
        stored = config.load()
    except config.ConfigFileError:
        stored = config.Credentials(None, None)
    address = server or options.server or stored.server
    if not address:
        raise CliProblem("name the server: unicron login --server URL", ExitCode.USAGE)
    address = checked_server(address)
    secret = token or options.token
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
