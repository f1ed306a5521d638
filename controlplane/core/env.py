"""Typed helpers that read configuration from the environment (shared by the control plane's settings
and the node agent).

Every helper names the variable in its error, and ``NAME_FILE`` (a path to a file holding the value)
is honoured for secrets, as in healthchecks' ``hc/settings.py``. Unset or empty: the default.
"""

from __future__ import annotations

import os
from pathlib import Path


class ConfigError(RuntimeError, ValueError):
    """A configuration variable is missing or malformed; the message names it. A ``ValueError`` too:
    callers that refuse bad values (argument parsers, the agent's CLI) catch it as one."""


def env_str(name: str, default: str | None = None) -> str | None:
    file_var = os.environ.get(f"{name}_FILE")
    if file_var:
        try:
            return Path(file_var).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"{name}_FILE={file_var!r} cannot be read: {exc}") from exc
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value


def env_required(name: str) -> str:
    value = env_str(name)
    if value is None:
        raise ConfigError(f"{name} must be set")
    return value


def env_bool(name: str, default: bool) -> bool:
    value = env_str(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ConfigError(f"{name}={value!r} is not a boolean (use true/false, 1/0, yes/no, on/off)")


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    value = env_str(name)
    if value is None:
        return default
    try:
        parsed = int(value.strip())
    except ValueError as exc:
        raise ConfigError(f"{name}={value!r} is not an integer") from exc
    if minimum is not None and maximum is not None and not minimum <= parsed <= maximum:
        raise ConfigError(f"{name}={parsed} must be between {minimum} and {maximum}")
    if minimum is not None and parsed < minimum:
        raise ConfigError(f"{name}={parsed} must be at least {minimum}")
    if maximum is not None and parsed > maximum:
        raise ConfigError(f"{name}={parsed} must be at most {maximum}")
    return parsed


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    value = env_str(name)
    if value is None:
        return default
    try:
        parsed = float(value)
    except ValueError as exc:
        raise ConfigError(f"{name}={value!r} is not a number") from exc
    if minimum is not None and parsed < minimum:
        raise ConfigError(f"{name}={parsed} must be at least {minimum}")
    return parsed


def env_list(name: str, default: list[str]) -> list[str]:
    value = env_str(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_choice(name: str, choices: tuple[str, ...], default: str) -> str:
    """One of ``choices`` (case and surrounding blanks ignored)."""
    value = env_str(name)
    if value is None or not value.strip():
        return default
    lowered = value.strip().lower()
    if lowered not in choices:
        raise ConfigError(f"{name}={lowered!r} is not one of {', '.join(choices)}")
    return lowered
