"""``unicron token ...``: the calling user's API token: describe it, rotate it."""

from __future__ import annotations

import typer

from controlplane.cli import config
from controlplane.cli.common import OutputOption, global_options, open_client
from controlplane.cli.render import Output, print_json, stderr, stdout, when

app = typer.Typer(help="Your API token: show when it expires, rotate it.", no_args_is_help=True)


@app.command("show")
def show(ctx: typer.Context, output: OutputOption = Output.TABLE) -> None:
    """Show your API token: its prefix, when it was created, when it expires, when it was last used."""
    with open_client(ctx) as client:
        tokens = client.list_my_tokens()
    if output is Output.JSON:
        print_json(tokens)
        return
    console = stdout()
    if not tokens:
        console.print("No API token.")
    for token in tokens:
        console.print(
            f"{token.get('prefix')}…  created {when(token.get('created_at'))}, "
            f"expires {when(token.get('expires_at'))}, last used {when(token.get('last_used_at')) or 'never'}"
        )


@app.command("rotate")
def rotate(ctx: typer.Context, output: OutputOption = Output.TABLE) -> None:
    """Get a new API token; the current one stops working. When the current one came from the config
    file, the new one replaces it there; otherwise (--token, UNICRON_TOKEN) it is printed, once."""
    from_file = global_options(ctx).token is None
    with open_client(ctx) as client:
        issued = client.rotate_my_token()
        server = client.server
    saved = None
    if from_file:
        try:
            saved = config.save(config.Credentials(server, str(issued["token"])))
        except OSError as exc:  # the old token no longer works: the new one must not be lost
            stderr().print(
                f"unicron: could not save the new token ({exc}); it is printed below", markup=False
            )
    if output is Output.JSON:
        print_json(issued)
        return
    expires = when(issued.get("expires_at"))
    if saved is not None:
        stdout().print(f"Rotated: new token {issued.get('prefix')}… expires {expires}; saved to {saved}")
    else:
        stdout().print(f"Rotated: the new token (shown once) expires {expires}:")
        stdout().print(str(issued["token"]), markup=False)
