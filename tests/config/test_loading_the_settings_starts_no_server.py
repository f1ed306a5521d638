"""Loading the settings with nothing set starts no process: the settings point at the embedded servers'
addresses, and only the entry points that need the servers start them (manage.py here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUP = (
    "import json, django; django.setup(); from django.conf import settings; "
    "print(json.dumps({'db': settings.DATABASES['default']['HOST'], 'redis': settings.REDIS_URL}))"
)


def _nothing_set(state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(UNICRON_STATE_DIR=str(state), DJANGO_SETTINGS_MODULE="controlplane.config.settings")
    return env


def _started_under(state: Path) -> list[str]:
    found = subprocess.run(["pgrep", "-af", str(state)], capture_output=True, text=True).stdout
    return [line for line in found.splitlines() if "pgrep" not in line]


def test_django_setup_with_nothing_set_starts_no_process(tmp_path: Path) -> None:
    state = tmp_path / "state"
    out = subprocess.run(
        [sys.executable, "-c", SETUP],
        cwd=ROOT,
        env=_nothing_set(state),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    addresses = json.loads(out.stdout.strip().splitlines()[-1])
    assert addresses["db"] == str(state / "pgdata")
    port = (state / "redis.port").read_text()
    assert addresses["redis"] == f"redis://127.0.0.1:{port}/0"
    assert not (state / "pgdata" / "PG_VERSION").exists()  # never initialised, so never started
    assert not (state / "redis.db").exists()
    assert _started_under(state) == []


@pytest.mark.slow
def test_manage_py_with_nothing_set_starts_the_servers_and_stops_them(tmp_path: Path) -> None:
    state = tmp_path / "state"
    out = subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"],
        cwd=ROOT,
        env=_nothing_set(state),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (state / "pgdata" / "PG_VERSION").exists()  # it ran against the embedded PostgreSQL
    assert _started_under(state) == []
