"""``UNICRON_STATE_DIR`` moves everything a run writes, the tasks' persistent checkpoints included (unless
``UNICRON_CHECKPOINT_ROOT`` names another place)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHOW = (
    "import django; django.setup(); from django.conf import settings; print(settings.UNICRON_CHECKPOINT_ROOT)"
)


def checkpoint_root(**env: str) -> str:
    full = dict(os.environ, DJANGO_SETTINGS_MODULE="controlplane.config.settings", **env)
    full.pop("UNICRON_CHECKPOINT_ROOT", None) if "UNICRON_CHECKPOINT_ROOT" not in env else None
    result = subprocess.run(
        [sys.executable, "-c", SHOW], cwd=ROOT, env=full, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_the_checkpoint_root_follows_the_state_directory(tmp_path: Path) -> None:
    assert checkpoint_root(UNICRON_STATE_DIR=str(tmp_path)) == str(tmp_path / "checkpoints")


def test_an_explicit_checkpoint_root_wins(tmp_path: Path) -> None:
    chosen = tmp_path / "shared" / "ckpt"
    assert checkpoint_root(UNICRON_STATE_DIR=str(tmp_path), UNICRON_CHECKPOINT_ROOT=str(chosen)) == str(
        chosen
    )
