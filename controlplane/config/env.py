"""Typed helpers that read configuration from the environment: the generic ones live in
:mod:`controlplane.core.env` (the node agent reads its settings with them too) and are re-exported
here; the database and Redis URL helpers are the control plane's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from controlplane.core.env import (
    ConfigError,
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_list,
    env_required,
    env_str,
)

__all__ = [
    "ConfigError",
    "check_redis_url",
    "env_bool",
    "env_choice",
    "env_float",
    "env_int",
    "env_list",
    "env_required",
    "env_str",
    "format_database_url",
    "parse_database_url",
]


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
