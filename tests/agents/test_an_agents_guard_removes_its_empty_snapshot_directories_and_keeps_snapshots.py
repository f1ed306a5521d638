"""Once its agent is gone the guard removes the directories of the snapshot root that hold no file (the root
too when nothing is left), and keeps every snapshot file: an agent restarted with the same run directory
finds them again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agents.guard import remove_empty_dirs


def test_empty_directories_go_and_snapshot_files_stay(tmp_path: Path) -> None:
    root = tmp_path / "shm"
    (root / "node-a" / "t1" / "e1-i3").mkdir(parents=True)
    kept = root / "node-a" / "t2" / "e1-i9" / "rank0.pt"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"state")
    remove_empty_dirs(root)
    assert not (root / "node-a" / "t1").exists()
    assert kept.read_bytes() == b"state"


def test_a_guard_whose_agent_is_gone_leaves_no_empty_root(tmp_path: Path) -> None:
    root = tmp_path / "shm"
    (root / "node-a" / "incoming").mkdir(parents=True)
    guard = subprocess.Popen(
        [sys.executable, "-m", "agents.guard", "no-such-agent", str(root)], stdin=subprocess.PIPE
    )
    assert guard.stdin is not None
    guard.stdin.close()  # what the kernel does when the agent dies
    assert guard.wait(30) == 0
    assert not root.exists()
