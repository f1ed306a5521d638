"""A malformed configuration variable stops start-up with a message naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from controlplane.config.env import ConfigError, env_bool, env_int, format_database_url, parse_database_url

ROOT = Path(__file__).resolve().parents[2]


def test_bad_boolean_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEBUG", "maybe")
    with pytest.raises(ConfigError, match="DEBUG='maybe' is not a boolean"):
        env_bool("DEBUG", False)


def test_integer_below_minimum_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNICRON_METRICS_MAX_POINTS", "1")
    with pytest.raises(ConfigError, match="UNICRON_METRICS_MAX_POINTS=1 must be at least 2"):
        env_int("UNICRON_METRICS_MAX_POINTS", 500, minimum=2)


def test_secret_file_is_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("SECRET_KEY_FILE", str(secret))
    from controlplane.config.env import env_str

    assert env_str("SECRET_KEY") == "s3cret"


def test_database_url_with_socket_directory_is_parsed() -> None:
    parsed = parse_database_url("DATABASE_URL", "postgresql://postgres:@/postgres?host=/tmp/pg")
    assert parsed["HOST"] == "/tmp/pg"
    assert parsed["NAME"] == "postgres"
    assert parsed["USER"] == "postgres"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u@h/db", "only postgresql:// URLs"),
        ("postgresql://u@h:5432/", "names no database"),
        ("postgresql://u@h:99999/db", "invalid port"),
    ],
)
def test_bad_database_url_is_refused(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_database_url("DATABASE_URL", url)


def _django_setup(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``django.setup()`` in a fresh interpreter with ``env`` (a database URL added when it names none)."""
    env = dict(env, DJANGO_SETTINGS_MODULE="controlplane.config.settings")
    env.setdefault("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_django_refuses_to_start_with_a_bad_redis_url() -> None:
    result = _django_setup(dict(os.environ, REDIS_URL="http://nope"))
    assert result.returncode != 0
    assert "REDIS_URL='http://nope'" in result.stderr


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres:@/test_postgres?host=/work/.run/pgdata",
        "postgresql://postgres@127.0.0.1:5432/test_postgres",
        "postgresql://u:p%40ss@db.internal:6543/unicron",
        "postgresql://postgres@:5433/test_postgres?host=/tmp/pg",
    ],
)
def test_database_url_round_trips_through_the_settings_entry(url: str) -> None:
    parsed = parse_database_url("DATABASE_URL", url)
    assert parse_database_url("DATABASE_URL", format_database_url(parsed)) == parsed


@pytest.mark.parametrize(
    "deadlines",
    [
        {"UNICRON_HEARTBEAT_INTERVAL_S": "2"},  # a heartbeat period as long as the suspect deadline
        {"UNICRON_SUSPECT_AFTER_S": "4"},  # suspect after the node is lost (2.8 s)
    ],
    ids=["period_not_below_suspect", "suspect_after_lost"],
)
def test_django_refuses_to_start_with_health_deadlines_out_of_order(deadlines: dict[str, str]) -> None:
    env = dict(os.environ, **deadlines)
    for name in ("UNICRON_HEARTBEAT_INTERVAL_S", "UNICRON_SUSPECT_AFTER_S", "UNICRON_LOST_AFTER_S"):
        if name not in deadlines:
            env.pop(name, None)
    result = _django_setup(env)
    assert result.returncode != 0
    assert "UNICRON_SUSPECT_AFTER_S=" in result.stderr
    assert "must hold" in result.stderr
