"""Typed helpers that read configuration from the environment.

Every helper names the variable in its error, and ``NAME_FILE`` (a path to a file holding the value)
is honoured for secrets, as in healthchecks' ``hc/settings.py``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit


class ConfigError(RuntimeError):
    """A configuration variable is missing or malformed; the message names it."""


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


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = env_str(name)
    if value is None:
        return default
    try:
        parsed = int(value)
    except ValueError as exc:
        raise ConfigError(f"{name}={value!r} is not an integer") from exc
    if minimum is not None and parsed < minimum:
        raise ConfigError(f"{name}={parsed} must be at least {minimum}")
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


def parse_database_url(name: str, url: str) -> dict[str, object]:
    """Turn ``postgresql://user:pass@host:port/db?host=/socket/dir`` into Django's DATABASES entry."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise ConfigError(f"{name}={url!r}: only postgresql:// URLs are supported")
    query = parse_qs(parts.query)
    host = query.get("host", [parts.hostname or ""])[0]
    database = unquote(parts.path.lstrip("/"))
    if not database:
        raise ConfigError(f"{name}={url!r} names no database (postgresql://user@host:port/DATABASE)")
    try:
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{name}={url!r} has an invalid port") from exc
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": database,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": host,
        "PORT": str(port or ""),
        "CONN_MAX_AGE": 0,
        "OPTIONS": {"connect_timeout": 5},
    }


def format_database_url(settings: Mapping[str, Any]) -> str:
    """The inverse of :func:`parse_database_url`: a ``DATABASE_URL`` for a Django DATABASES entry.

    A host that is a socket directory (embedded PostgreSQL) goes into the ``host`` query parameter,
    where both this module and libpq read it; a TCP host goes into the authority."""
    user = quote(str(settings.get("USER") or ""), safe="")
    password = quote(str(settings.get("PASSWORD") or ""), safe="")
    credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = str(settings.get("HOST") or "")
    port = str(settings.get("PORT") or "")
    database = quote(str(settings["NAME"]), safe="")
    if host.startswith("/"):
        authority = f"{credentials}:{port}" if port else credentials
        return f"postgresql://{authority}/{database}?host={quote(host, safe='/')}"
    authority = f"{credentials}{host or '127.0.0.1'}" + (f":{port}" if port else "")
    return f"postgresql://{authority}/{database}"


def check_redis_url(name: str, url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in {"redis", "rediss", "unix"}:
        raise ConfigError(f"{name}={url!r}: expected a redis://host:port/db URL")
    try:
        _ = parts.port
    except ValueError as exc:
        raise ConfigError(f"{name}={url!r} has an invalid port") from exc
    return url
