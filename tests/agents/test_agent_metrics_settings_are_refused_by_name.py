"""``UNICRON_AGENT_METRICS_PORT`` that is not a port stops the agent before anything starts, with a
message naming the variable; a port already taken stops it naming both variables; 0 turns the
endpoint off."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agents.settings import ENV_METRICS_ADDR, ENV_METRICS_PORT, MetricsEndpoint, metrics_endpoint

REPO = Path(__file__).resolve().parents[2]


def _agent(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *(sys.executable, "-m", "agents", "--coordinator", "ws://127.0.0.1:9/ws/agent/", "--token", "t"),
            *("--devices", "1", "--worker", "sim", "--run-dir", str(tmp_path), "--no-snapshots"),
        ],
        cwd=str(REPO),
        env=dict(os.environ, PYTHONPATH=str(REPO), **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("value", ["abc", "70000", "-1"])
def test_a_bad_port_stops_the_agent_naming_the_variable(value: str, tmp_path: Path) -> None:
    done = _agent({ENV_METRICS_PORT: value}, tmp_path)
    assert done.returncode != 0
    assert f"{ENV_METRICS_PORT}=" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_taken_port_stops_the_agent_naming_it(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _agent({ENV_METRICS_PORT: str(port), ENV_METRICS_ADDR: "127.0.0.1"}, tmp_path)
    assert done.returncode != 0
    assert f"{ENV_METRICS_PORT}={port} / {ENV_METRICS_ADDR}=127.0.0.1: cannot listen" in done.stderr


def test_zero_or_unset_is_off_and_the_address_defaults_to_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_METRICS_ADDR, raising=False)
    monkeypatch.setenv(ENV_METRICS_PORT, "0")
    assert metrics_endpoint() is None
    monkeypatch.delenv(ENV_METRICS_PORT)
    assert metrics_endpoint() is None
    monkeypatch.setenv(ENV_METRICS_PORT, "9101")
    assert metrics_endpoint() == MetricsEndpoint("127.0.0.1", 9101)
