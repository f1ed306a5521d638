"""Whatever harness starts an agent (the demo, the end-to-end tests, the benches), the node's token never
appears on its command line, which every user of the machine can read: it goes into an owner-only file
the agent reads."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from controlplane.config.system import agent_command


def test_a_token_is_passed_in_an_owner_only_file(tmp_path: Path) -> None:
    run_dir = tmp_path / "node-1"
    argv = agent_command(
        "ws://127.0.0.1:9/ws/agent/", "node-1", run_dir, devices=1, worker="sim", token="s3cr3t"
    )
    assert not any("s3cr3t" in arg for arg in argv)
    token_file = Path(argv[argv.index("--token-file") + 1])
    assert token_file.read_text() == "s3cr3t"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600


def test_a_token_file_given_is_passed_as_it_is(tmp_path: Path) -> None:
    given = tmp_path / "t"
    argv = agent_command("ws://x/ws/agent/", "n", tmp_path, devices=1, worker="sim", token_file=given)
    assert argv[argv.index("--token-file") + 1] == str(given)
    assert "--token" not in argv


def test_no_token_at_all_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="agent n: a token or a token file is needed"):
        agent_command("ws://x/ws/agent/", "n", tmp_path, devices=1, worker="sim")
