"""``manage.py check --deploy`` with production settings (DEBUG off, a SECRET_KEY set, nothing else)
finds no issue at all: HSTS, SSL redirect, secure cookies and the rest are the defaults."""

from __future__ import annotations

import subprocess
import sys

from tests.security.production import ROOT, production_env


def test_check_deploy_reports_no_issue() -> None:
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=production_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout
