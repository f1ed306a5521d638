"""Where ``unicron`` keeps the server and token: ``$UNICRON_CONFIG`` or ``~/.config/unicron/config.json``.

The file holds a credential: it is written 0600 (atomically, through a temporary file in the same
directory), in a directory created 0700. ``--server`` / ``--token`` and ``UNICRON_SERVER`` /
``UNICRON_TOKEN`` override what it says.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from controlplane.cli.client import normalise_server

CONFIG_ENV = "UNICRON_CONFIG"
SERVER_ENV = "UNICRON_SERVER"
TOKEN_ENV = "UNICRON_TOKEN"


class ConfigFileError(Exception):
    """The config file exists but cannot be read or is not what ``unicron login`` writes."""


@dataclass(frozen=True)
class Credentials:
    server: str | None
    token: str | None


def config_path() -> Path:
    named = os.environ.get(CONFIG_ENV, "").strip()
    if named:
        return Path(named).expanduser()
    return Path.home() / ".config" / "unicron" / "config.json"


def load(path: Path | None = None) -> Credentials:
    """What the config file says (both None when there is no file)."""
    path = path or config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Credentials(None, None)
    except OSError as exc:
        raise ConfigFileError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigFileError(f"{path} is not JSON ({exc}); run `unicron login` again") from exc
    if not isinstance(data, dict):
        raise ConfigFileError(f"{path} does not hold a JSON object; run `unicron login` again")
    server, token = data.get("server"), data.get("token")
    if not isinstance(server, str | None) or not isinstance(token, str | None):
        raise ConfigFileError(f"{path}: server and token must be strings; run `unicron login` again")
    return Credentials(server or None, token or None)


def save(credentials: Credentials, path: Path | None = None) -> Path:
    """Write the file 0600 in a 0700 directory (created if missing); returns its path."""
    path = path or config_path()
    directory = path.parent
    if not directory.exists():
        directory.mkdir(mode=0o700, parents=True)
        directory.chmod(0o700)  # mkdir's mode is masked by the umask
    body = json.dumps({"server": credentials.server, "token": credentials.token}, indent=2) + "\n"
    temporary = directory / f".{path.name}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write(body)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise
    return path


def forget(path: Path | None = None) -> bool:
    """Delete the config file; False when there was none."""
    path = path or config_path()
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def resolve(server: str | None, token: str | None, path: Path | None = None) -> Credentials:
    """Flags (already merged with the environment by the command line) first, then the config file.

    The stored token goes only to the stored server: with another server named and no token given,
    there is no token (it is never sent to a server it was not issued by)."""
    if server and token:
        return Credentials(server, token)
    stored = load(path)
    if server and stored.server and _same_server(server, stored.server):
        return Credentials(server, token or stored.token)
    if server:
        return Credentials(server, token)
    return Credentials(stored.server, token or stored.token)


def _same_server(a: str, b: str) -> bool:
    try:
        return normalise_server(a) == normalise_server(b)
    except ValueError:
        return False
