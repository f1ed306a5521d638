"""The harness can run several ASGI servers, as a deployment runs them behind one balancer: ``web``,
``web-2``, ``web-3`` each on a port of its own, every agent-link address listed (a harness spreads its
agents over them), and a dead one restarted on the port it had."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from controlplane.config.system import System
from tests.processes import spawn

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def _port(command: list[str]) -> int:
    return int(command[command.index("-p") + 1])


def test_the_harness_runs_several_asgi_servers_each_on_a_port_of_its_own(tmp_path: Path) -> None:
    commands: list[list[str]] = []

    def recording(command: Sequence[str], **kwargs: Any) -> Any:
        commands.append(list(command))
        return spawn(SLEEPER, **kwargs)  # the command is what is under test, not daphne itself

    system = System(tmp_path / "run", spawn=recording, say=lambda line: None)
    system.urls = {"DATABASE_URL": "postgresql://unused", "REDIS_URL": "redis://unused"}  # nothing connects
    try:
        children = system.start_web(3)
        assert [c.name for c in children] == ["web", "web-2", "web-3"]
        ports = [_port(c) for c in commands]
        assert ports[0] == system.port
        assert len(set(ports)) == 3
        assert all("daphne" in c for c in commands)
        assert system.agent_urls == [f"ws://127.0.0.1:{p}/ws/agent/" for p in ports]

        second = children[1]
        assert second.process is not None
        second.process.kill()
        second.process.wait(10)
        system.supervise()  # seen dead: a restart is due after its back-off
        second.restart_due = 0.0
        system.supervise()
        assert _port(commands[-1]) == ports[1]
        assert system.agent_urls[1] == f"ws://127.0.0.1:{ports[1]}/ws/agent/"
    finally:
        system.stop(grace_s=2.0)


def test_no_asgi_server_is_refused(tmp_path: Path) -> None:
    system = System(tmp_path / "run", say=lambda line: None)
    with pytest.raises(ValueError, match="at least 1"):
        system.start_web(0)
    assert system.children == {}
