"""The embedded Redis's port is kept in ``redis.port`` under the state directory. When another program
listens there while no embedded Redis runs, the entry point draws another port, keeps it, and goes on
(the embedded Redis keeps nothing on disk, so nothing is lost); and a server stopped a moment ago does not
make its own port look taken to the next run (its connections linger in TIME_WAIT)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _nothing_set(state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(UNICRON_STATE_DIR=str(state), DJANGO_SETTINGS_MODULE="controlplane.config.settings")
    return env


def _manage_check(state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=_nothing_set(state),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _left_under(state: Path) -> list[str]:
    found = subprocess.run(["pgrep", "-af", str(state)], capture_output=True, text=True).stdout
    return [line for line in found.splitlines() if "pgrep" not in line]


def test_a_kept_port_another_program_listens_on_is_replaced(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    (state / "redis.port").write_text(str(taken))
    try:
        out = _manage_check(state)
    finally:
        squatter.close()
    assert out.returncode == 0, out.stderr[-3000:]
    kept = int((state / "redis.port").read_text())
    assert kept != taken
    assert f"port {taken} is taken by another program" in out.stderr
    assert _left_under(state) == []


def test_two_runs_back_to_back_share_the_kept_port(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = _manage_check(state)
    assert first.returncode == 0, first.stderr[-3000:]
    port = (state / "redis.port").read_text()
    second = _manage_check(state)
    assert second.returncode == 0, second.stderr[-3000:]
    assert (state / "redis.port").read_text() == port
    assert "taken by another program" not in second.stderr
    assert _left_under(state) == []
