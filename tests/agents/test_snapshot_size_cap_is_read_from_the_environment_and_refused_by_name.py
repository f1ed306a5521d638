"""``UNICRON_SNAPSHOT_MAX_BYTES`` caps what an agent's snapshot store accepts (unset or 0: only the free
space and the task's known size bound it); a value that is not a whole number of bytes stops the agent
with a message naming the variable, before it connects anywhere."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agents.cli import build_parser, snapshot_config
from agents.settings import snapshot_max_bytes
from tests.agents.helpers import REPO

BASE = ["--coordinator", "ws://127.0.0.1:9/ws/agent/", "--token", "t", "--devices", "1"]


def test_the_cap_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    args = build_parser().parse_args([*BASE, "--snapshot-dir", str(tmp_path)])
    monkeypatch.delenv("UNICRON_SNAPSHOT_MAX_BYTES", raising=False)
    assert snapshot_config(args, snapshot_max_bytes()).max_bytes is None
    monkeypatch.setenv("UNICRON_SNAPSHOT_MAX_BYTES", "0")
    assert snapshot_config(args, snapshot_max_bytes()).max_bytes is None
    monkeypatch.setenv("UNICRON_SNAPSHOT_MAX_BYTES", str(8 << 30))
    assert snapshot_config(args, snapshot_max_bytes()).max_bytes == 8 << 30


@pytest.mark.parametrize("bad", ["8G", "-1", "1.5"])
def test_a_bad_cap_stops_the_agent_naming_the_variable(bad: str, tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "UNICRON_SNAPSHOT_MAX_BYTES": bad}
    cmd = [sys.executable, "-m", "agents", *BASE, "--worker", "sim", "--snapshot-dir", str(tmp_path)]
    done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert "UNICRON_SNAPSHOT_MAX_BYTES" in done.stderr
    assert "Traceback" not in done.stderr
